"""Notifications: tell people when their work ends, starts after waiting, or is about to be stopped.

An event is recorded in the same transaction as the state change that caused it (an outbox), fanned out
by Celery into one delivery per channel and recipient, and each delivery is claimed atomically before it
is sent, so nothing is lost when a process dies and nothing is sent twice unless the sender died after
the receiver accepted a message (then the same Message-ID / Idempotency-Key lets the receiver drop it).
Other code records an event with `notifications.events.notify`.
"""
