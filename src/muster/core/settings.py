"""Every environment variable muster reads, read here and nowhere else."""

from __future__ import annotations

import os
import socket

from muster.exceptions import InvalidArgumentError

#: Modules the local engine's zygote imports once, so forked workers start warm
#: (the torch family only once the driver has imported torch).  numpy (2.x) imports
#: ``numpy.random`` lazily, on first use: ~25-100 ms that every worker paid when it
#: drew its own seed at start (and every report, to save its state), so it is preloaded too.
DEFAULT_PRELOAD = (
    "torch",
    "numpy",
    "numpy.random",
    "muster.train._internal.worker",
)
#: What DDP needs on top, which ``TorchTrainer`` asks the engine to preload as soon as it
#: is built (``Runtime.preload``): torch._dynamo is imported by DistributedDataParallel's
#: constructor (about 800 modules, 2-4 s per process here), so paying it once in the zygote
#: takes it off every worker's, and every restart's, path to the first step.  Workers that
#: never build DDP (Tune function trials, tasks, actors) neither wait for it nor carry it
#: (a zygote holding it forks and exits ~2x slower).
DDP_PRELOAD = (
    "torch.distributed",
    "torch.nn.parallel",
    "torch._dynamo",
)


def preload_modules(with_torch: bool = True, extra: "list[str] | tuple[str, ...]" = ()) -> list[str]:
    """What the zygote imports before forking: ``MUSTER_PRELOAD`` (comma-separated) when set, else
    :data:`DEFAULT_PRELOAD` plus ``extra`` (what trainers asked for, e.g. :data:`DDP_PRELOAD`),
    less the torch family of the default while the driver has not imported torch (``with_torch``
    false): workers of a driver that never uses torch (plain Tune trials, tasks) then start seconds
    sooner, and a driver that imports torch later gets it preloaded from then on."""
    raw = os.environ.get("MUSTER_PRELOAD")
    if raw is not None:
        return [m.strip() for m in raw.split(",") if m.strip()]
    base = [m for m in DEFAULT_PRELOAD if with_torch or not (m == "torch" or m.startswith("torch."))]
    return base + [m for m in extra if m not in base]


def cluster_address() -> str | None:
    """``MUSTER_ADDRESS`` or ``RAY_ADDRESS``: which engine ``init()`` picks by default."""
    return os.environ.get("MUSTER_ADDRESS") or os.environ.get("RAY_ADDRESS") or None


def storage_path_default() -> str:
    return os.environ.get("MUSTER_STORAGE_PATH") or os.path.join(os.path.expanduser("~"), "muster_results")


def chdir_to_trial_dir() -> bool:
    """Ray's ``RAY_CHDIR_TO_TRIAL_DIR=0``: a Tune trial keeps the driver's working folder instead of
    running in its own trial folder."""
    return os.environ.get("RAY_CHDIR_TO_TRIAL_DIR", "1") != "0"


def tune_sigint_handler_disabled() -> bool:
    """Ray's ``TUNE_DISABLE_SIGINT_HANDLER=1``: Tune leaves SIGINT alone, so Ctrl-C raises ``KeyboardInterrupt``
    out of ``Tuner.fit()`` (or reaches the program's own handler) instead of ending the run gracefully."""
    return os.environ.get("TUNE_DISABLE_SIGINT_HANDLER", "0").strip() not in ("", "0")


def log_prefix_enabled() -> bool:
    return os.environ.get("MUSTER_LOG_PREFIX", "1") != "0"


def force_plain_progress() -> bool:
    """``MUSTER_PLAIN_PROGRESS=1``: plain lines even on a terminal."""
    return os.environ.get("MUSTER_PLAIN_PROGRESS", "0") == "1"


def zygote_fork_enabled() -> bool:
    """``MUSTER_ZYGOTE_FORK=0``: always start the zygote as a fresh interpreter, never fork the driver."""
    return os.environ.get("MUSTER_ZYGOTE_FORK", "1") != "0"


def vllm_group_nice() -> str:
    """``MUSTER_VLLM_NICE``: the nice of the scheduling group a vLLM replica and its engine's processes
    run in (0 leaves them in the worker's group); checked where it is used."""
    return os.environ.get("MUSTER_VLLM_NICE", "10")


def shared_memory_transport() -> bool:
    """``MUSTER_SHARED_MEMORY=0`` streams big buffers through the socket instead of memfds."""
    return os.environ.get("MUSTER_SHARED_MEMORY", "1") != "0"


def run_store_enabled() -> bool:
    """``MUSTER_RUN_STORE=0`` turns the run store (dashboard, ``muster runs``) off."""
    return os.environ.get("MUSTER_RUN_STORE", "1") != "0"


def metrics_report_interval_s() -> float:
    """``MUSTER_METRICS_REPORT_INTERVAL_MS`` (Ray's ``metrics_report_interval_ms``): how often a process
    sends the user metrics it changed (``muster.util.metrics``) to the driver; default 5000, at least 100."""
    raw = os.environ.get("MUSTER_METRICS_REPORT_INTERVAL_MS", "5000")
    try:
        return max(float(raw), 100.0) / 1000.0
    except ValueError:
        raise InvalidArgumentError(
            f"MUSTER_METRICS_REPORT_INTERVAL_MS={raw!r} is not a number of milliseconds; set it to e.g. 5000."
        ) from None


def run_store_dir() -> str:
    """Where run stores of non-local storage roots (``s3://...``) live: ``MUSTER_STORE_DIR``."""
    return os.environ.get("MUSTER_STORE_DIR") or os.path.join(os.path.expanduser("~"), ".muster", "stores")


def dashboard_token() -> str | None:
    """``MUSTER_DASHBOARD_TOKEN``: the dashboard's access token, when not given on the command line."""
    return os.environ.get("MUSTER_DASHBOARD_TOKEN") or None


def node_identity() -> tuple[str | None, str | None]:
    """``(node id, node IP)`` a cluster engine recorded for this worker process, if any."""
    return os.environ.get("MUSTER_NODE_ID") or None, os.environ.get("MUSTER_NODE_IP") or None


def node_ip_address() -> str:
    """This node's IP address as other nodes would reach it, as Ray's ``get_node_ip_address()``: the
    one a cluster engine recorded for this worker, else the address of the interface that routes
    off this machine (127.0.0.1 when it has none). Every part of muster that shows or uses a node's
    IP (Tune's ``node_ip``, a train worker's rendezvous address, ``muster.nodes()``) asks here."""
    _, recorded = node_identity()
    if recorded:
        return recorded
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def set_node_identity(node_id: str, ip: str) -> None:
    """Record this worker's node (by the cluster engine, at worker start), for :func:`node_identity`."""
    os.environ["MUSTER_NODE_ID"], os.environ["MUSTER_NODE_IP"] = node_id, ip


def session_name() -> str | None:
    """``MUSTER_SESSION_NAME``: the name of the session this process belongs to (set by ``muster.init``
    in the driver; its workers inherit it), for Ray's ``get_runtime_context().get_session_name()``."""
    return os.environ.get("MUSTER_SESSION_NAME") or None


def start_session() -> str:
    """Name a new session, as Ray names one (``session_<date>_<time>_<microseconds>_<driver pid>``), and
    record it in this process's environment so the workers started from now on share it."""
    import datetime

    name = f"session_{datetime.datetime.now().strftime('%Y-%m-%d_%H-%M-%S_%f')}_{os.getpid()}"
    os.environ["MUSTER_SESSION_NAME"] = name
    return name


def ray_address_file() -> str:
    """Where ``ray start --head`` records the cluster's address on this machine."""
    import tempfile

    base = os.environ.get("RAY_TMPDIR") or os.path.join(tempfile.gettempdir(), "ray")
    return os.path.join(base, "ray_current_cluster")


#: Driver environment variables a cluster engine passes on to every worker (by prefix).
FORWARDED_PREFIXES = ("MUSTER_", "NCCL_", "GLOO_", "TORCH_", "PYTORCH_", "CUDA_LAUNCH_BLOCKING", "AWS_",
                      "GOOGLE_", "AZURE_", "HF_", "WANDB_", "MLFLOW_")
_NOT_FORWARDED = ("MUSTER_ADDRESS", "MUSTER_NODE_ID", "MUSTER_NODE_IP", "MUSTER_ZYGOTE")


def forwarded_env() -> dict[str, str]:
    """What a cluster engine sets in each worker from the driver's environment.

    On one machine every worker inherits the driver's environment; on a
    cluster it starts from the node's.  muster carries over the variables
    training depends on (see ``FORWARDED_PREFIXES``: NCCL/Gloo/torch tuning,
    cloud storage credentials, experiment trackers) and any named in
    ``MUSTER_WORKER_ENV`` (comma-separated), instead of losing them silently.
    """
    extra = {v.strip() for v in os.environ.get("MUSTER_WORKER_ENV", "").split(",") if v.strip()}
    return {
        k: v
        for k, v in os.environ.items()
        if (k.startswith(FORWARDED_PREFIXES) or k in extra) and k not in _NOT_FORWARDED
    }


def serve_state_dir() -> str:
    """Where running Serve instances record how to reach them (``MUSTER_SERVE_DIR``), for ``muster serve``."""
    return os.environ.get("MUSTER_SERVE_DIR") or os.path.join(os.path.expanduser("~"), ".muster", "serve")


def serve_model_matching_timeout_s() -> float:
    """``RAY_SERVE_MULTIPLEXED_MODEL_ID_MATCHING_TIMEOUT_S`` (Ray's name and default, 1): how long a request
    naming a multiplexed model waits for a busy replica that holds it before loading it on another one (the
    wait is drawn between this and twice this, as Ray's). Read in the process that routes the request.

    Raises:
        InvalidArgumentError: the variable is set to something other than a non-negative number.
    """
    name = "RAY_SERVE_MULTIPLEXED_MODEL_ID_MATCHING_TIMEOUT_S"
    raw = os.environ.get(name)
    if raw is None:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise InvalidArgumentError(f"environment variable {name}={raw!r}: give a number of seconds, 0 or more "
                                   "(unset: 1).")
    return value


def tune_strict_metric_checking() -> bool:
    """Ray's ``TUNE_DISABLE_STRICT_METRIC_CHECKING=1``: a trial result without the metric that Tune's
    config, scheduler or searcher ranks by is let through instead of ending the experiment."""
    return os.environ.get("TUNE_DISABLE_STRICT_METRIC_CHECKING", "0").strip() in ("", "0")


def tune_dated_subdir_disabled() -> bool:
    """Ray's ``TUNE_DISABLE_DATED_SUBDIR=1``: an experiment given no name is named after its trainable alone,
    without the date, so every such run writes into one folder.

    Raises:
        InvalidArgumentError: the value is not an integer (Ray fails on it too).
    """
    raw = os.environ.get("TUNE_DISABLE_DATED_SUBDIR", "0")
    try:
        return bool(int(raw))
    except ValueError:
        raise InvalidArgumentError(f"TUNE_DISABLE_DATED_SUBDIR={raw!r}: set it to 1 (no date in the experiment "
                                   "folder's name) or 0 (the default), as Ray reads it.") from None
