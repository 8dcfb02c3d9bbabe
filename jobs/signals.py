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
