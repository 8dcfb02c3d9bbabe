"""The queue: admission (who takes GPUs now, per cohort), the sharing plan, preemption, start estimates, and the commands that change quotas and sharing."""
