"""A workload's Kubernetes objects: creating them, watching them, mapping what Kubernetes reports to states, and the GPU node inventory."""
