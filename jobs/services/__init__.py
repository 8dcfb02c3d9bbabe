"""Business logic as plain functions, called alike by the UI, the API, admin and Celery tasks.

A folder per concept:
    submission/  a workload submitted: intake (store it QUEUED), the facts it is judged against, queue caps
    queue/       admission per cohort and GPU type, the sharing plan, preemption, start estimates and their
                 forecast, and the commands that change quotas, cohorts and sharing rules
    cluster/     a workload's Kubernetes objects: creating them, watching them, mapping what Kubernetes
                 reports to states, and the GPU node inventory
    usage/       GPU-hour accounting, usage reports, the one CSV writer
    storage/     workspaces and stored secrets
    logs/        container logs and events, and the slots that bound followed log streams
What they all share stands here: the fields and checks of a submission (spec_fields, validation), the
state machine (transitions), team namespaces (provisioning), handing work to Celery (dispatch), and the
workload actions and duties that span concepts (cancel, opening, lifecycle, seeding).
"""
