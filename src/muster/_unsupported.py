"""Ray names muster knows and does not provide, with the nearest muster equivalent.

Each public package's module ``__getattr__`` asks :func:`raise_unsupported`,
so a ported script fails with an error that names the API and what to use
instead (the porting guide, docs/porting.md, lists the same by Ray module).
"""

from __future__ import annotations

import dis
import importlib.abc
import sys
from types import FrameType
from typing import Any, NoReturn

from muster.exceptions import UnsupportedRayAPIError, UnsupportedRayImportError

_GUIDE = "See docs/porting.md for what is supported."

#: module -> {Ray name: nearest muster equivalent}
UNSUPPORTED: dict[str, dict[str, str]] = {
    "muster": {
        "LoggingConfig": "muster.init(logging_level=..., logging_format=...) for the driver's `muster` logger, and "
        "runtime_env={'worker_process_setup_hook': fn} with fn calling logging.basicConfig(...) for the workers' "
        "logging (Ray's LoggingConfig configures that); for Serve, muster.serve.LoggingConfig",
        "timeline": "the run store: `muster runs` and the dashboard (`muster dashboard`)",
        "java_function": "Python tasks only: @muster.remote on a Python function",
        "java_actor_class": "Python actors only: @muster.remote on a Python class",
        "cpp_function": "Python tasks only: @muster.remote on a Python function",
        "client": "muster.init(address='ray://<head>:10001') to run on a Ray cluster",
        "workflow": "Tune/Train checkpoints (muster.train.Checkpoint) for durable progress",
        "dag": "plain task composition: pass ObjectRefs from one .remote() call to the next",
        "experimental": "no muster equivalent (Ray's experimental APIs are not ported); for "
        "experimental.tqdm_ray, plain tqdm in the task: its bar reaches the driver as the task's output",
        "rllib": "no muster equivalent; run RLlib on Ray itself",
        "autoscaler": "a Ray cluster's autoscaler, through muster.init(address=...)",
        "job_submission": "run the script itself (python script.py); on a cluster, muster.init(address=...)",
        "get_dashboard_url": "`muster dashboard` (the run store's dashboard)",
        "_private": "Ray's internals are not ported: for internal_api.free, drop the ObjectRef (a value goes "
        "once no ref to it is left, or at muster.shutdown() once its id reached a worker or a pickle); for "
        "memory_summary, muster.available_resources()",
    },
    "muster.RemoteFunction": {
        "bind": "call f.remote(...) and pass its ObjectRef to the next .remote() call (Ray's DAG API, "
        ".bind()/.execute() and compiled graphs, is not ported)",
    },
    "muster.ActorClass": {
        "bind": "start the actor with Cls.remote(...) and call its methods with .remote() (Ray's DAG API, "
        ".bind()/.execute() and compiled graphs, is not ported)",
    },
    "muster.util": {
        "pdb": "no remote debugger: call the function directly in the driver to step through it with pdb, or "
        "print from the task (its output reaches the driver)",
        "connect": "muster.init(address=...)",
        "disconnect": "muster.shutdown()",
        "get_node_instance_id": "muster.get_runtime_context().get_node_id()",
        "enable_periodic_logging": "muster.util.log_once(key) to log a message once",
        "disable_log_once_globally": "muster.util.log_once(key) (muster has no global switch for it)",
        "collective": "torch.distributed inside a TorchTrainer (muster.train.torch.TorchTrainer)",
        "iter": "muster.data (from_items(...).map_batches(...).iter_batches()) for parallel iterators, or "
        "muster.util.ActorPool",
        "dask": "no muster equivalent",
        "spark": "no muster equivalent",
        "tracing": "no muster equivalent",
        "annotations": "no muster equivalent",
    },
    "muster.util.state": {  # Ray's state API beyond actors, placement groups and nodes: no record is kept
        **{name: "muster.available_resources() for what is free; objects are not recorded (a value lives while "
                 "an ObjectRef to it does)" for name in ("list_objects", "get_objects", "summarize_objects")},
        **{name: "muster.util.state.list_actors() (pid, node_id) for actor processes, list_tasks() (worker_pid) "
                 "for the process that ran a task" for name in ("list_workers", "get_worker")},
        **{name: "one job per driver: muster.get_runtime_context().get_job_id()" for name in ("list_jobs", "get_job")},
        **{name: "a worker's output reaches the driver's console and the run store: `muster runs` and "
                 "`muster dashboard`" for name in ("get_log", "list_logs")},
        "list_runtime_envs": "runtime_env applies env_vars only (see docs/porting.md)",
        "list_cluster_events": "muster's warnings on the `muster` logger",
        "StateApiClient": "the functions of muster.util.state (list_actors, list_tasks, list_placement_groups, "
        "list_nodes)",
    },
    "muster.train": {
        "NCCLHangError": "WorkerGroupError: a collective that never completes is reported after "
        "RunConfig(stall_report_s=...) (each rank's stack) and ended by the process group's timeout "
        "(TorchConfig(timeout_s=...))",
        "LoggingConfig": "muster.init(logging_level=...) and RunConfig(verbose=...)",
        "SyncConfig": "RunConfig(storage_path=...): checkpoints are written to storage directly",
        "BackendConfig": "TorchTrainer(torch_config=muster.train.torch.TorchConfig(...))",
        "data_parallel_trainer": "muster.train.torch.TorchTrainer (Ray's V1 DataParallelTrainer is not ported; "
        "Ray Train V2's, whose loop sets up torch.distributed itself, is "
        "muster.train.v2.api.data_parallel_trainer.DataParallelTrainer)",
        "constants": "the values themselves: \"train\", the datasets= key of the dataset a TorchTrainer splits; "
        "RunConfig(storage_path=...) (default ~/muster_results) for where runs go",
        "utils": "no muster equivalent (Ray's internal helpers for its trainers)",
        **{name: f"muster.train.torch.TorchTrainer (PyTorch with torch.distributed); muster has no {name} trainer"
           for name in ("xgboost", "lightgbm", "tensorflow", "horovod")},
    },
    "muster.train.TrainContext": {
        # Ray 2.60 deprecates these (each raises a DeprecationWarning there), Trials being Tune's alone
        **{name: "tune.get_context()'s of the same name in a Tune trial's function; in a training loop, "
                 "get_experiment_name() and get_run_dir()" for name in ("get_trial_id", "get_trial_resources")},
        "get_metadata": "read what the trainer was given from train_loop_config, or a checkpoint's from "
        "checkpoint.get_metadata() (Ray 2.60 removed the trainer's metadata)",
        "get_storage": "get_run_dir() for the run's folder in storage. Ray's StorageContext serves "
        "report(checkpoint_upload_mode=NO_UPLOAD), which muster refuses (it copies every checkpoint): a "
        "TorchTrainer run only to validate (Ray's asynchronous-validation guide) reports its metrics without a "
        "checkpoint, report({'score': ...}), and its result.metrics holds them",
    },
    "muster.train.base_trainer": {
        "BaseTrainer": "muster.train.torch.TorchTrainer (muster has one trainer; "
                       "subclassing BaseTrainer is not ported)",
        "GenDataset": "a muster.data.Dataset in TorchTrainer(datasets={...})",
    },
    "muster.train.lightning": {
        "RayDeepSpeedStrategy": "RayFSDPStrategy (MusterFSDPStrategy) to shard the model, or "
        "lightning.pytorch.strategies.DeepSpeedStrategy(cluster_environment=RayLightningEnvironment()) yourself",
    },
    "muster.tune.examples": {  # Ray's examples that download data or need other libraries (see its __init__)
        **{name: "the trainable written out in your script (Ray's example downloads its data); "
                 "muster.tune.examples.pbt_function is the one Ray example muster ships"
           for name in ("mnist_pytorch", "mnist_pytorch_trainable", "mnist_ptl_mini", "cifar10_pytorch",
                        "pbt_convnet_example", "pbt_convnet_function_example", "pbt_dcgan_mnist",
                        "pbt_transformers", "pbt_memnn_example")},
        **{name: "none: muster trains PyTorch; this Ray example needs another library"
           for name in ("tf_mnist_example", "tune_mnist_keras", "pbt_tune_cifar10_with_keras", "xgboost_example",
                        "lightgbm_example", "xgboost_dynamic_resources_example", "pbt_ppo_example", "pb2_ppo_example")},
    },
    "muster.train.examples.pytorch": {
        **{name: "the training function written out in your script (Ray's example downloads its data); "
                 "muster.train.examples.pytorch.torch_linear_example is the one Ray example muster ships"
           for name in ("torch_fashion_mnist_example", "torch_quick_start", "torch_regression_example",
                        "torch_data_prefetch_benchmark")},
    },
    "muster.train.huggingface": {
        "TransformersTrainer": "TorchTrainer, with muster.train.huggingface.transformers.prepare_trainer(trainer) "
        "on the transformers.Trainer inside train_loop_per_worker (as Ray's own guide now does)",
    },
    "muster.tune.experiment.Trial": {
        "logdir": "Trial.local_path (the trial's folder on this machine; Trial.path in storage), as Ray 2.60's "
        "logdir says",
    },
    "muster.data.DataIterator": {  # a training worker's shard (get_dataset_shard), as Dataset's
        "to_tf": "iter_batches(batch_format='numpy') fed to tf.data",
        "iter_tf_batches": "iter_batches(batch_format='numpy')",
        "iter_jax_batches": "iter_batches(batch_format='numpy') fed to jax.numpy.asarray",
    },
    "muster.runtime_context.RuntimeContext": {
        "gcs_address": "none: muster's embedded engine has no GCS (on a Ray cluster, ray.get_runtime_context()'s)",
        "current_placement_group_id": "get_placement_group_id() (Ray deprecated current_placement_group_id)",
        "get_temp_dir": "tempfile.gettempdir() (muster keeps no session folder of Ray's layout)",
        "runtime_env": "the env_vars you passed (muster applies only runtime_env's env_vars)",
        "get_runtime_env_string": "the env_vars you passed (muster applies only runtime_env's env_vars)",
        "get_node_labels": "muster.nodes() (the embedded engine's node has Ray's ray.io/node-id label)",
    },
    "muster.data.Dataset": {
        "to_tf": "iter_batches(batch_format='numpy') fed to tf.data",
        "iter_tf_batches": "iter_batches(batch_format='numpy')",
        "iter_jax_batches": "iter_batches(batch_format='numpy') fed to jax.numpy.asarray",
        "to_dask": "to_pandas()",
        "to_spark": "to_pandas() or to_arrow()",
        "to_modin": "to_pandas()",
        "write_tfrecords": "write_parquet()",
        "write_webdataset": "write_parquet()",
        "write_sql": "iter_batches() with your database client",
        "write_mongo": "iter_batches() with your database client",
        "write_bigquery": "iter_batches() with your database client",
        # Ray 2.60's other Dataset methods muster lacks
        "to_random_access_dataset": "materialize(), then to_pandas().set_index(key) for lookups by key",
        "to_mars": "to_pandas()",
        "to_daft": "to_arrow_refs() or to_pandas()",
        "write_orc": "write_parquet()",
        "write_lance": "write_parquet()",
        "write_delta": "write_parquet()",
        "write_iceberg": "write_parquet()",
        "write_clickhouse": "iter_batches() with your database client",
        "write_snowflake": "iter_batches() with your database client",
        "write_kafka": "iter_batches() with your Kafka producer",
        "write_turbopuffer": "iter_batches() with your vector store's client",
        "get_internal_block_refs": "iter_batches(batch_format='pyarrow') (blocks are pyarrow Tables)",
        "iter_internal_ref_bundles": "iter_batches(batch_format='pyarrow', batch_size=None) (whole blocks)",
        "context": "muster.data.DataContext.get_current() (one context per process)",
        "serialize_lineage": "cloudpickle.dumps(ds): a Dataset pickles with its plan",
        "has_serializable_lineage": "nothing to check: a Dataset pickles with its plan (cloudpickle.dumps(ds))",
        "deserialize_lineage": "cloudpickle.loads(data) of a pickled Dataset",
    },
    "muster.data": {
        "ShuffleStrategy": "muster.data.context.ShuffleStrategy (where Ray has it too)",
        "read_orc": "from_arrow(pyarrow.orc.read_table(path)) (or read_parquet() after converting the files)",
        "read_avro": "from_items() of the records fastavro.reader(open(path, 'rb')) yields",
        "read_audio": "read_binary_files() and decode each file's bytes in map() (e.g. soundfile.read(io.BytesIO(b)))",
        "read_videos": "read_binary_files() and decode each file's bytes in map() (e.g. with PyAV or decord)",
        "read_mcap": "from_items() of the messages the mcap package reads",
        "read_zarr": "from_numpy() of the zarr arrays",
        "read_kafka": "from_items() of the messages your Kafka consumer polled",
        "KafkaAuthConfig": "your Kafka client's own settings (muster has no read_kafka)",
        "read_clickhouse": "from_pandas() of your ClickHouse client's query result",
        "ClickHouseTableSettings": "your ClickHouse client's settings (muster has no ClickHouse writer)",
        "SinkMode": "write_parquet(mode=...) or your database client",
        "read_snowflake": "from_pandas() of the Snowflake connector's fetch_pandas_all()",
        "read_unity_catalog": "read_parquet() of the table's files",
        "read_delta_sharing_tables": "from_pandas(delta_sharing.load_as_pandas(url))",
        "read_lerobot": "read_parquet() of the dataset's files",
        "from_daft": "from_arrow(daft_df.to_arrow())",
        "from_mars": "from_pandas(mars_df.to_pandas())",
        "list_stats_summaries": "Dataset.stats() (each dataset's own statistics)",
        "read_tfrecords": "read_parquet() after converting the files",
        "read_webdataset": "read_binary_files()",
        "read_databricks_tables": "from_pandas() or read_parquet() of an export",
        "read_bigquery": "from_pandas() or read_parquet() of an export",
        "read_mongo": "from_items() of the documents",
        "read_lance": "read_parquet() of an export",
        "read_delta": "read_parquet() of the table's files",
        "read_iceberg": "read_parquet() of the table's files",
        "read_hudi": "read_parquet() of the table's files",
        "from_spark": "from_pandas(spark_df.toPandas())",
        "from_dask": "from_pandas(dask_df.compute())",
        "from_modin": "from_pandas()",
        "from_tf": "from_numpy() or from_items()",
        "extensions": "plain arrays: a column given as a list of same-shape ndarrays (or one N-d array) is a "
        "tensor column on its own, stored as pyarrow's FixedShapeTensorType (muster.data.block.VariableShapeTensorType "
        "when shapes differ); Ray's tensor columns in Parquet files are read back as these",
        "_internal": "public names: a read yields pyarrow Tables or pandas DataFrames "
        "(pyarrow.Table.from_pylist(rows), not DelegatingBlockBuilder); test a null with "
        "`value is None or value != value` (not _internal.util.is_null); muster.data.block.BlockAccessor",
    },
    "muster.data.datasource": {
        "Partitioning": "read_parquet(partitioning='hive') (the default) or a pyarrow.dataset.partitioning(...)",
    },
    "muster.data.aggregate": {
        "ApproximateQuantile": "Quantile(on, q=...): exact, computed over each group's values",
        "ApproximateTopK": "an AggregateFn over the group's rows",
    },
    "muster.serve": {  # Ray 2.60's ray.serve names and modules muster lacks
        "ControllerOptions": "none: the controller runs in the driver; http_options configure the ingress",
        "TracingConfig": "no muster equivalent (no request tracing)",
        "get_trace_context": "no muster equivalent (no request tracing)",
        "task_consumer": "no muster equivalent: call the deployment through a DeploymentHandle",
        "task_processor": "no muster equivalent: call the deployment through a DeploymentHandle",
        "gradio_integrations": "no muster equivalent: serve the Gradio app's FastAPI app with @serve.ingress",
        # gone from Ray 2.60 too (Ray 2.x's deployment graph API), still in old scripts and docs
        "drivers": "none (Ray removed DAGDriver too): pass bound deployments to .bind() and call their handles in "
                   "the ingress deployment (model composition)",
        "deployment_graph": "none (Ray removed InputNode too): pass bound deployments to .bind() and call their "
                            "handles in the ingress deployment (model composition)",
        "http_adapters": "none (Ray removed them too): read the starlette Request in __call__ (await request.json())",
        "grpc_util": "none: muster serves HTTP only (http_options); a replica reads the starlette Request",
        "taskiq_task_processor": "no muster equivalent: call the deployment through a DeploymentHandle",
        "utils": "none: Ray's ray.serve.utils.get_trace_context is request tracing, which muster does not have",
    },
    "muster.serve.exceptions": {
        "gRPCStatusError": "none: muster serves HTTP only; raise starlette's HTTPException(status_code=...) for an "
                           "HTTP status",
    },
    "muster.serve.autoscaling_policy": {
        name: "none: muster queries no Prometheus; a custom policy reads ctx.aggregated_metrics / ctx.raw_metrics, "
              "the values of the deployment's record_autoscaling_stats()"
        for name in ("PrometheusQueryMixin", "PrometheusScalar", "PrometheusSample", "PrometheusVector")
    },
    "muster.serve.llm": {
        "LLMRouter": "muster.serve.llm.build_openai_app({'llm_configs': [...]}) (its OpenAiIngress routes by model)",
        "LoraConfig": "none: serve a model with the adapter merged, one LLMConfig per model",
        "build_vllm_deployment": "muster.serve.llm.build_llm_deployment(LLMConfig(..., llm_engine='vllm'))",
        "deployment": "muster.serve.llm.build_llm_deployment(llm_config) or muster.serve.llm.LLMServer",
        "ingress": "muster.serve.llm.build_openai_app(...) or muster.serve.llm.OpenAiIngress",
        "CloudMirrorConfig": "ModelLoadingConfig(model_source=...) with a Hugging Face id or a local directory (no "
                             "cloud mirror: download the weights first)",
        **{name: "muster.serve.llm.build_openai_app(...) (no prefill/decode disaggregation or data-parallel "
                 "attention: replicas of LLMServer, each with its engine; deployment_config={'num_replicas': n})"
           for name in ("build_pd_openai_app", "build_dp_deployment", "build_dp_openai_app")},
        "request_router": "none: the OpenAiIngress routes by model, each model's replicas by their requests in "
                          "flight (no prefix-cache or KV-aware router)",
        "openai_api_models": "muster.serve.llm.protocol (the OpenAI request and response models: "
                             "ChatCompletionRequest, CompletionRequest, ChatCompletion, Completion, ...), or call the "
                             "app's /v1 routes over HTTP",
    },
    "muster.serve.schema": {
        "ServeInstanceDetails": "muster.serve.status() (a ServeStatus)",
        "ApplicationDetails": "muster.serve.status().applications[name] (an ApplicationStatusOverview)",
        "DeploymentDetails": "muster.serve.status().applications[app].deployments[name] (a DeploymentStatusOverview)",
        "ReplicaDetails": "DeploymentStatusOverview.replica_states (replicas per state)",
        "ProxyDetails": "muster.serve.status().proxies and .http (one ingress process)",
        "HTTPOptionsSchema": "muster.serve.config.HTTPOptions",
        "gRPCOptionsSchema": "none: muster serves HTTP only (http_options)",
        # Ray 2.60's other schema names: the REST API's and dashboard's models, and the task processor's
        "TracingConfig": "no muster equivalent (no request tracing)",
        "ServeActorDetails": "muster.serve.status(): the controller runs in the driver; .proxies and .http are the "
                             "one ingress",
        **{name: "muster.serve.status().applications[app].deployments[name]: its status ('UPSCALING', ...), "
                 "target_replicas and message (the last autoscaling decision)"
           for name in ("AutoscalingMetricsHealth", "AutoscalingStatus", "ScalingDecision",
                        "DeploymentAutoscalingDetail")},
        **{name: "muster.serve.status().applications[app].deployments (calls between them go through the handles "
                 "passed to .bind())" for name in ("DeploymentNode", "DeploymentTopology")},
        **{name: "muster.serve.status().http (the one ingress's host and port) and each app's route_prefix"
           for name in ("Target", "TargetGroup")},
        **{name: "none: the controller runs in the driver; a deployment's request figures are in "
                 "muster.serve.status().applications[app].deployments[name].metrics"
           for name in ("DurationStats", "ControllerHealthMetrics")},
        **{name: "no muster equivalent (no asynchronous task queue): call the deployment through a DeploymentHandle"
           for name in ("CeleryAdapterConfig", "TaskProcessorConfig", "TaskResult", "TaskProcessorAdapter")},
        "ScaleDeploymentRequest": "serve.run(App.options(num_replicas=n).bind(), name=...) (a redeploy that changes "
                                  "only the count keeps the live replicas)",
        "RequestRouterConfig": "none: replicas are picked by power of two choices over their requests in flight",
    },
    "muster.serve.config": {
        "ControllerOptions": "none: the controller runs in the driver (set its environment before starting the "
                             "script); http_options configure the ingress",
        "RequestRouterConfig": "none: replicas are picked by power of two choices over their requests in flight",
        "gRPCOptions": "none: muster serves HTTP only (http_options)",
    },
    "muster.serve.handle": {
        "RayServeHandle": "muster.serve.handle.DeploymentHandle (serve.get_deployment_handle / get_app_handle)",
        "RayServeSyncHandle": "muster.serve.handle.DeploymentHandle (.remote(...).result())",
        "RayServeDeploymentHandle": "muster.serve.handle.DeploymentHandle (`await handle.remote(...)`)",
    },
    "muster.serve.DeploymentHandle": {  # Ray 2.60's handle methods muster lacks (a handle's other names are methods)
        name: "handle.remote(...) (or handle.options(method_name=...).remote(...)): the router picks the replica and "
              f"sends at once, with no separate pick; to call a deployment method named {name!r}, use "
              f"handle.options(method_name={name!r}).remote(...), as in Ray"
        for name in ("choose_replica", "dispatch")
    },
    "muster.serve.request_router": {
        name: "none: replicas are picked by power of two choices over their requests in flight (no custom router)"
        for name in ("RequestRouter", "PendingRequest", "ReplicaID", "RunningReplica", "ReplicaResult",
                     "FIFOMixin", "LocalityMixin", "MultiplexMixin")
    },
    "muster.air": {
        "session": "muster.train's functions: session.report / get_checkpoint / get_context / "
        "get_dataset_shard(name) become muster.train.report / get_checkpoint / get_context / get_dataset_shard",
    },
    "muster.air.integrations.mlflow": {
        "setup_mlflow": "mlflow.start_run() in rank 0 of train_loop_per_worker, or MLflowLoggerCallback",
    },
    "muster.tune": {
        "SyncConfig": "muster.train.RunConfig(storage_path=...): storage is written directly",
        "register_trainable": "pass the function or Trainable class to muster.tune.Tuner directly",
        "register_env": "no muster equivalent (RLlib environments)",
        "is_session_enabled": "muster.tune.get_context().get_trial_id() is not None (inside a trial)",
        "syncer": "muster.train.RunConfig(storage_path=...): storage is written directly (no SyncConfig)",
        "registry": "pass the function or Trainable class to muster.tune.Tuner directly (no trainable registry)",
    },
    "muster.tune.logger": {
        "aim": "muster.tune.logger.LoggerCallback subclassed to log to Aim, or MLflowLoggerCallback",
        "wandb": "muster.air.integrations.mlflow.MLflowLoggerCallback, or wandb.init()/wandb.log() in the trainable",
        "comet": "muster.air.integrations.mlflow.MLflowLoggerCallback, or comet_ml's Experiment in the trainable",
    },
    "muster.train.torch": {
        "xla": "muster.train.torch.TorchTrainer on GPUs or CPUs (no TPU/XLA backend)",
    },
    "muster.tune.utils.mock_trainable": {
        "register_mock_trainable": "pass MyTrainableClass to muster.tune.Tuner directly (no trainable registry)",
    },
    "muster.tune.utils": {
        "deep_update": "a dict merge of your own ({**a, **b}, recursively for nested dicts)",
        "merge_dicts": "a dict merge of your own ({**a, **b}, recursively for nested dicts)",
        "unflattened_lookup": "plain indexing of the nested dict (d['a']['b'] for 'a/b')",
        "date_str": "time.strftime('%Y-%m-%d_%H-%M-%S')",
        "UtilMonitor": "the run store's per-worker CPU, RSS and GPU samples (`muster dashboard`)",
        "warn_if_slow": "no muster equivalent (the live view and progress reporter show slow steps)",
        "flatten_dict": "pandas.json_normalize(d, sep='/').iloc[0].to_dict()",
        "wait_for_gpu": "none: a trial's GPUs are its own when it starts (tune.with_resources(trainable, {'gpu': n}))",
    },
    "muster.tune.search": {
        name: "muster.tune.search.optuna.OptunaSearch (Optuna's TPE and other samplers), or "
        "BasicVariantGenerator for grid and random search"
        for name in ("hyperopt", "bayesopt", "bohb", "ax", "nevergrad", "hebo", "zoopt", "skopt", "dragonfly",
                     "flaml", "HyperOptSearch", "BayesOptSearch", "TuneBOHB", "AxSearch", "NevergradSearch",
                     "HEBOSearch", "ZOOptSearch", "SkOptSearch")
    },
    "muster.tune.schedulers": {
        "HyperBandForBOHB": "muster.tune.schedulers.HyperBandScheduler",
        "ResourceChangingScheduler": "fixed resources per trial: tune.with_resources(trainable, {...})",
        "hb_bohb": "muster.tune.schedulers.HyperBandScheduler, with muster.tune.search.optuna.OptunaSearch "
        "for model-based search (BOHB's TuneBOHB needs hpbandster, not ported)",
        "resource_changing_scheduler": "fixed resources per trial: tune.with_resources(trainable, {...})",
    },
    "muster.tune.integration": {
        name: f"a function trainable that trains with {name} itself and calls muster.tune.report(...) from the "
        f"library's callback (muster has no {name} trainer)" for name in ("xgboost", "lightgbm", "keras")
    },
    "muster.air.integrations": {
        "wandb": "muster.air.integrations.mlflow.MLflowLoggerCallback, or wandb.init()/wandb.log() in rank 0 "
        "of the training function",
        "comet": "muster.air.integrations.mlflow.MLflowLoggerCallback, or comet_ml's Experiment in rank 0 of the "
        "training function",
        "keras": "none: muster trains PyTorch (muster.train.torch.TorchTrainer)",
    },
}


#: module -> {name Ray itself removed: what replaced it in Ray (and here)}; their error says "removed from Ray"
REMOVED: dict[str, dict[str, str]] = {
    "muster.data.Dataset": {
        "fully_executed": "call materialize()",
        "is_fully_executed": "test isinstance(ds, muster.data.MaterializedDataset) (what materialize() returns)",
        "lazy": "drop the call: every Dataset is lazy",
        "default_batch_format": "name batch_format= at the call ('numpy', the default of iter_batches and "
        "map_batches, 'pandas' or 'pyarrow')",
        "dataset_format": "call schema() (the columns and their types)",
        "repeat": "loop over the epochs: for epoch in range(n): for batch in ds.iter_batches(...) (each pass runs "
        "the plan again)",
        "window": "iterate ds.iter_batches(...): execution streams blocks as they are made",
        "to_torch": "call iter_torch_batches(batch_size=...), or wrap it in a torch IterableDataset",
    },
    "muster.data": {
        "range_table": "call muster.data.range(n) (its column is 'id'; range_table's was 'value')",
        "range_arrow": "call muster.data.range(n) (its column is 'id')",
        "DatasetPipeline": "use muster.data.Dataset, which streams; loop over epochs with ds.iter_batches(...)",
    },
    "muster.data.preprocessors": {
        "BatchMapper": "call Dataset.map_batches(fn, batch_format=...)",
    },
}

#: keyword arguments Ray removed from its iterators (``iter_batches``, ``iter_torch_batches``): their replacement
REMOVED_ARGS: dict[str, str] = {
    "prefetch_blocks": "prefetch_batches=",
}


def refuse_removed_args(where: str, given: dict[str, Any]) -> None:
    """Raise for keywords ``where`` does not take: naming the replacement for one Ray removed.

    Raises:
        InvalidTypeError: the first of ``given``, as ``TypeError`` would name it, with the fix.
    """
    from muster.exceptions import InvalidTypeError

    for name in given:
        if name in REMOVED_ARGS:
            raise InvalidTypeError(f"{where}({name}=...): Ray removed {name!r}; pass {REMOVED_ARGS[name]} instead.")
        raise InvalidTypeError(f"{where}() got an unexpected keyword argument {name!r}. {_GUIDE}")


class UnsupportedModuleFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: ``import muster.util.dask`` (a Ray module muster does not
    provide) raises :class:`UnsupportedRayImportError` naming the equivalent, not a bare
    ``ModuleNotFoundError``. Asked only once every other finder found nothing."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        parent, _, name = fullname.rpartition(".")
        nearest = UNSUPPORTED.get(parent, {}).get(name) if parent.split(".")[0] == "muster" else None
        if nearest is not None:
            raise UnsupportedRayImportError(
                f"{fullname} (Ray's ray{fullname.removeprefix('muster')}) is not supported by muster; nearest "
                f"equivalent: {nearest}. {_GUIDE}", name=fullname,
            )
        return None


def install_finder() -> None:
    if not any(isinstance(f, UnsupportedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(UnsupportedModuleFinder())


def raise_unsupported(module: str, name: str) -> NoReturn:
    """Raise the error for ``module.name``: unsupported (with its equivalent) or simply unknown."""
    nearest = UNSUPPORTED.get(module, {}).get(name)
    replaced = REMOVED.get(module, {}).get(name)
    if nearest is not None or replaced is not None:
        ray_name = f"ray{module.removeprefix('muster')}.{name}"
        message = (f"{module}.{name} ({ray_name}) was removed from Ray; instead, {replaced}. {_GUIDE}"
                   if replaced is not None else
                   f"{module}.{name} (Ray's {ray_name}) is not supported by muster; nearest equivalent: {nearest}. "
                   f"{_GUIDE}")
        if _from_import():
            raise UnsupportedRayImportError(message, name=name)
        raise UnsupportedRayAPIError(message)
    owner = module.rsplit(".", 1)[-1]
    what = f"{owner!r} object" if owner[:1].isupper() else f"module {module!r}"  # a class's table, or a module's
    raise AttributeError(f"{what} has no attribute {name!r}. {_GUIDE}")


def _from_import() -> bool:
    """Whether a ``from module import name`` statement is looking the name up."""
    frame: FrameType | None = sys._getframe(2)  # this <- raise_unsupported <- the module's __getattr__
    while frame is not None and frame.f_code.co_name == "__getattr__":
        frame = frame.f_back
    if frame is None:
        return False
    at = frame.f_lasti
    return any(i.offset == at and i.opname == "IMPORT_FROM" for i in dis.get_instructions(frame.f_code))
