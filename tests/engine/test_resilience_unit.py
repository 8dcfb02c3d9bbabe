"""Work that survives, its pure parts: what a stop loses, which victim the plan takes, the retry decision,
the GPU fault judgement, and what a batch job's pod is given (contract variables, token, node affinity)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.kube import objects
from jobs.services.checkpoints import contract
from jobs.services.checkpoints.cost import age_words, gpu_hours_words, lost_gpu_seconds
from jobs.services.cluster.gpu_faults import GpuSeen, Watch, judge
from jobs.services.queue.sharing_plan import Held, Reason, TeamQuota, Waiting, plan
from jobs.services.queue.stop_cost import min_runtime_seconds, preemptible_from
from jobs.services.retry import backoff_seconds, decide
from tests.engine.test_objects import spec

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
A, B = 1, 2


# --- what a stop loses -------------------------------------------------------------------------------
def test_lost_work_counts_from_the_last_checkpoint_of_this_run_or_its_start():
    at = T0 + timedelta(hours=2)
    assert lost_gpu_seconds(gpus=4, started_at=T0, last_checkpoint_at=None, at=at) == 4 * 7200
    assert lost_gpu_seconds(gpus=4, started_at=T0, last_checkpoint_at=at - timedelta(minutes=10), at=at) == 4 * 600
    # A checkpoint of an earlier attempt saves nothing of this run.
    assert lost_gpu_seconds(gpus=2, started_at=T0, last_checkpoint_at=T0 - timedelta(hours=1), at=at) == 2 * 7200
    assert lost_gpu_seconds(gpus=2, started_at=None, last_checkpoint_at=None, at=at) == 0
    assert gpu_hours_words(4 * 600) == "0.67 GPU-hours"
    assert gpu_hours_words(3600) == "1.00 GPU-hour"
    assert gpu_hours_words(5) == "under 0.01 GPU-hours"
    assert [age_words(s) for s in (42, 420, 3 * 3600 + 300, 2 * 86400 + 4 * 3600)] == [
        "42 s", "7 min", "3 h 05 min", "2 d 4 h",
    ]  # fmt: skip


def test_the_lender_takes_the_borrowed_work_that_loses_least_not_the_newest():
    teams = {A: TeamQuota(A, quota=4), B: TeamQuota(B, quota=4, borrowing_limit=4)}
    held = [
        Held(10, B, 4),  # B's own quota
        # Same priority. The newest (13) checkpointed long ago; the older one (12) a minute ago.
        Held(12, B, 2, borrowed=True, order=3, lost=2 * 60),
        Held(13, B, 2, borrowed=True, order=4, lost=2 * 3000),
    ]
    assert plan(teams, held, [Waiting(1, A, 2)]).preempt == {12: 1}
    # Without checkpoints (equal loss) the newest goes, as before.
    even = [Held(10, B, 4), Held(12, B, 2, borrowed=True, order=3), Held(13, B, 2, borrowed=True, order=4)]
    assert plan(teams, even, [Waiting(1, A, 2)]).preempt == {13: 1}
    # Priority still comes first: a higher-priority job is kept even if it would lose less.
    ranked = [
        Held(10, B, 4),
        Held(12, B, 2, borrowed=True, priority=5, lost=1),
        Held(13, B, 2, borrowed=True, lost=9e9),
    ]
    assert plan(teams, ranked, [Waiting(1, A, 2)]).preempt == {13: 1}


def test_work_inside_its_minimum_runtime_is_not_taken():
    teams = {A: TeamQuota(A, quota=4), B: TeamQuota(B, quota=4, borrowing_limit=4)}
    held = [Held(10, B, 4), Held(12, B, 2, borrowed=True, preemptible=False), Held(13, B, 2, borrowed=True)]
    assert plan(teams, held, [Waiting(1, A, 2)]).preempt == {13: 1}
    result = plan(teams, held, [Waiting(1, A, 4)])  # it would need both: waits until 12 may go
    assert result.admit == []
    assert result.preempt == {}
    assert result.waiting[1] == Reason.MIN_RUNTIME  # the queue explains why it waits
    assert min_runtime_seconds(type_minimum=600, cohort_minimum=0) == 600
    assert min_runtime_seconds(type_minimum=600, cohort_minimum=1800) == 1800
    assert preemptible_from(T0, 600) == T0 + timedelta(minutes=10)
    assert preemptible_from(None, 600) is None
    assert preemptible_from(T0, 0) is None


# --- retry -------------------------------------------------------------------------------------------
def _decide(**kw):
    args = {"kind": "batch", "restartable": True, "reason": "Evicted", "exit_code": None, "retryable_exit_codes": [],
            "retries": 0, "limit": 3}  # fmt: skip
    args.update(kw)
    return decide(**args)


def test_ends_that_are_not_the_jobs_fault_are_retried_up_to_the_limit():
    for reason in ("Evicted", "NodeLost", "GpuFault", "ImagePullTimeout", "DeletionByTaintManager"):
        assert _decide(reason=reason).retry, reason
    assert not _decide(reason="ExitCode", exit_code=1).retry
    assert not _decide(reason="OOMKilled", exit_code=137).retry
    assert not _decide(reason="DeadlineExceeded").retry
    assert _decide(reason="ExitCode", exit_code=75, retryable_exit_codes=[75]).retry
    assert not _decide(restartable=False).retry
    assert not _decide(kind="service").retry
    over = _decide(retries=3, limit=3)
    assert not over.retry
    assert "limit 3" in over.why


def test_backoff_doubles_up_to_its_cap():
    assert [backoff_seconds(n, base=30, cap=900) for n in range(7)] == [30, 60, 120, 240, 480, 900, 900]
    assert backoff_seconds(5, base=0, cap=900) == 0


# --- GPU faults --------------------------------------------------------------------------------------
def _judge(gpu: GpuSeen, watch: Watch | None = None, at: datetime = T0):
    return judge(gpu, watch or Watch(), at=at, hot_celsius=92, hot_seconds=300)


def test_fatal_xid_ecc_and_lost_gpus_are_failures_application_xids_are_not():
    assert _judge(GpuSeen(0, "GPU-a")).healthy
    assert [c for c, _ in _judge(GpuSeen(0, "GPU-a", lost=True)).faults] == ["lost"]
    assert [c for c, _ in _judge(GpuSeen(0, "GPU-a", ecc_uncorrected=2)).faults] == ["ecc"]
    assert [c for c, _ in _judge(GpuSeen(0, "GPU-a", xid_errors=1, last_xid=79)).faults] == ["xid"]
    assert _judge(GpuSeen(0, "GPU-a", xid_errors=1, last_xid=13)).healthy  # an application's fault
    # The same Xid count again is no new failure; a restarted agent counting from zero again is.
    seen = Watch(xid_errors_seen=1)
    assert _judge(GpuSeen(0, "GPU-a", xid_errors=1, last_xid=79), seen).healthy
    assert not _judge(GpuSeen(0, "GPU-a", xid_errors=2, last_xid=79), seen).healthy


def test_over_temperature_counts_only_when_sustained():
    first = _judge(GpuSeen(0, "GPU-a", temperature_celsius=95))
    assert first.healthy
    assert first.watch.hot_since == T0
    later = _judge(GpuSeen(0, "GPU-a", temperature_celsius=94), first.watch, at=T0 + timedelta(seconds=301))
    assert [c for c, _ in later.faults] == ["thermal"]
    cooled = _judge(GpuSeen(0, "GPU-a", temperature_celsius=70), first.watch, at=T0 + timedelta(seconds=200))
    assert cooled.healthy
    assert cooled.watch.hot_since is None


# --- what the pod is given ---------------------------------------------------------------------------
HOME = {"kind": "home", "mount_path": "/home/alice"}
TEAM = {"kind": "team", "mount_path": "/team"}


def test_the_checkpoint_directory_is_in_a_workspace_that_outlives_the_attempt():
    assert contract.checkpoint_dir(workspace="home", mounts=[HOME, TEAM], name="train", uid="ab12") == (
        "/home/alice/.gpuportal/checkpoints/train-ab12"
    )
    assert contract.checkpoint_dir(workspace="team", mounts=[HOME, TEAM], name="train", uid="ab12") == (
        "/team/.gpuportal/checkpoints/train-ab12"
    )
    assert contract.checkpoint_dir(workspace="team", mounts=[HOME], name="t", uid="1").startswith("/home/alice/")
    env = dict(contract.contract_env(checkpoint_dir="/c", attempt=2, grace_seconds=30, api_url="http://10.0.0.1:8000",
                                     with_token=True))  # fmt: skip
    assert env == {
        "GPUPORTAL_ATTEMPT": "2", "GPUPORTAL_GRACE_SECONDS": "30", "GPUPORTAL_CHECKPOINT_DIR": "/c",
        "GPUPORTAL_API_URL": "http://10.0.0.1:8000", "GPUPORTAL_TOKEN_FILE": "/var/run/gpuportal/token",
    }  # fmt: skip


def test_a_batch_pod_mounts_its_token_read_only_and_avoids_unhealthy_nodes():
    job = objects.make_job(spec(token_secret="gpw-0123abcdef", avoid_nodes=("gpu-2", "gpu-1")))
    pod = job["spec"]["template"]["spec"]
    token_volume = next(v for v in pod["volumes"] if v["name"] == objects.TOKEN_VOLUME)
    assert token_volume["secret"]["secretName"] == "gpw-0123abcdef"
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == objects.TOKEN_VOLUME)
    assert mount == {"name": objects.TOKEN_VOLUME, "mountPath": "/var/run/gpuportal", "readOnly": True}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-1", "gpu-2"]}]}
    ]
    assert pod["automountServiceAccountToken"] is False
    plain = objects.make_job(spec())["spec"]["template"]["spec"]
    assert "affinity" not in plain
    assert all(v["name"] != objects.TOKEN_VOLUME for v in plain["volumes"])
    secret = objects.make_token_secret(spec(token_secret="gpw-0123abcdef"), "gpw_x")
    assert secret["metadata"]["name"] == "gpw-0123abcdef"
    assert secret["stringData"] == {"token": "gpw_x"}
