"""The provisioner's admission guard as a validating webhook (admissionregistration.k8s.io/v1), for
clusters without ValidatingAdmissionPolicy (Kubernetes < 1.26, ours is 1.20): the same two rules as
helm/templates/admission-policy.yaml. `rules.py` decides (pure), `server.py` serves it over HTTPS."""
