"""The service proxy at /w/<uid>/: researchers open the notebooks, TensorBoards and DIGITS they launched.

`proxy.app` is the ASGI application (HTTP and WebSocket), `proxy.access` the Django-side decisions (who,
where, activity, the portal's pages at the door), `proxy.headers` the pure header rules. Run it with
`python -m proxy` (uvicorn); in production it is its own Deployment (Helm `component: proxy`) behind the
ingress's `/w/` route, under `make run` it fronts the development server on the portal's own port.
"""
