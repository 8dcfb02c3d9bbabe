"""Everything that talks to Kubernetes or builds objects for it lives in this sub-package."""
