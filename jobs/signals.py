"""What the domain announces: a workload changed state, a workload was preempted.

Sent inside the transaction that made the change, so a receiver that records something (notifications
records an event, sent on commit) is rolled back with it. The domain does not know who listens: the
apps that care connect their receivers in their AppConfig.ready (notifications/receivers.py).
"""

from __future__ import annotations

from django.dispatch import Signal

# A guarded transition moved a workload: sent with workload=, from_state=, actor= (a user or None).
workload_transitioned = Signal()

# Preemption ended or requeued a workload so a lender got its GPUs back: sent with workload= (its new state
# and attempt already saved), once per preemption.
workload_preempted = Signal()

# A restartable batch job ended through no fault of its own and was requeued for its next attempt
# (jobs/services/retry.py): sent with workload= (new attempt saved), reason=, lost_gpu_seconds=.
workload_retried = Signal()

# A GPU of the node a workload runs on was marked unhealthy and the workload keeps running there (it is
# not retried elsewhere): sent with workload=, detail= (jobs/services/cluster/node_health.py).
workload_on_unhealthy_gpu = Signal()
