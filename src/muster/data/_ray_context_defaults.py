"""Ray 2.60's ``DataContext`` settings that muster keeps but does not act on, each with Ray's default.

Generated, not written by hand: the names are the fields of Ray 2.60's ``DataContext`` dataclass (a
private field behind a public property under the property's name, e.g. ``shuffle_strategy``) and its
other public properties; each value is what a fresh ``ray.data.DataContext()`` reads. Ray's nested
config objects (``autoscaling_config``, ``lance_config``...) are ``_Config`` namespaces with the same
attribute names and values; a list of Ray classes (``execution_callback_classes``, the issue detectors)
holds the classes' names. muster's own settings (``target_max_block_size``, ``enable_progress_bars``,
``enable_arrow_backed_pandas_conversion``) and ``execution_options`` are ``DataContext``'s, not here.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class _Config(SimpleNamespace):
    """One of Ray's nested settings objects (``ctx.autoscaling_config``): its fields as attributes."""

    def __init__(self, ray_name: str = "Config", **fields: Any):
        super().__init__(**fields)
        object.__setattr__(self, "_ray_name", ray_name)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "_ray_name")
        return f"{vars(self)['_ray_name']}({shown})"


#: setting name -> Ray 2.60's default (copied on first read, so lists and configs are each context's own)
#: the transient errors Ray's Iceberg catalog and Delta commits retry on (one list, used by both)
_RETRIED_ERRORS = (
    '429', '503', '502', '500', 'Too Many Requests', 'Service Unavailable', 'Internal Server Error',
    'Connection reset', 'Connection refused', 'Connection timed out', 'Read timed out', 'UNAVAILABLE',
    'DEADLINE_EXCEEDED',
)


RAY_DEFAULTS: dict[str, Any] = {
    'target_min_block_size': 1048576,
    'streaming_read_buffer_size': 33554432,
    'enable_pandas_block': True,
    'actor_prefetcher_enabled': False,
    'autoscaling_config': _Config('AutoscalingConfig',
        actor_pool_util_upscaling_threshold=1.75,
        actor_pool_util_downscaling_threshold=0.5,
        actor_pool_max_upscaling_delta=None),
    'use_push_based_shuffle': False,
    'shuffle_strategy': 'shuffle_v2',  # read back as ShuffleStrategy.SHUFFLE_V2
    'pipeline_push_based_shuffle_reduce_tasks': True,
    'default_hash_shuffle_parallelism': 200,
    'shuffle_compression': 'zstd',
    'hash_shuffle_reduce_batch_size': 16,
    'hash_shuffle_reduce_get_timeout_s': 1800.0,
    'shuffle_input_batch_bytes': 1073741824,
    'max_hash_shuffle_aggregators': None,
    'min_hash_shuffle_aggregator_wait_time_in_s': 300,
    'hash_shuffle_aggregator_health_warning_interval_s': 30,
    'max_hash_shuffle_finalization_batch_size': None,
    'join_operator_actor_num_cpus_override': None,
    'hash_shuffle_operator_actor_num_cpus_override': None,
    'hash_aggregate_operator_actor_num_cpus_override': None,
    'use_disk_based_hash_shuffle': False,
    'gpu_shuffle_num_actors': None,
    'gpu_shuffle_rmm_pool_size': None,
    'gpu_shuffle_spill_memory_limit': 'auto',
    'gpu_shuffle_setup_timeout_s': 120.0,
    'scheduling_strategy': 'SPREAD',
    'scheduling_strategy_large_args': 'DEFAULT',
    'large_args_threshold': 52428800,
    'use_polars': False,
    'use_polars_sort': False,
    'use_legacy_dataset_ids': False,
    'decoding_size_estimation': True,
    'min_parallelism': 200,
    'read_op_min_num_blocks': 200,
    'use_datasource_v2': True,
    'enable_tensor_extension_casting': True,
    'arrow_fixed_shape_tensor_format': 'v2',
    'use_arrow_tensor_v2': True,
    'enable_fallback_to_arrow_object_ext_type': None,
    'enable_auto_log_stats': False,
    'verbose_stats_logs': False,
    'accurate_map_phase_timing': False,
    'per_stage_map_timing': False,
    'trace_allocations': False,
    'use_ray_tqdm': True,
    'enable_operator_progress_bars': True,
    'enable_progress_bar_name_truncation': True,
    'enable_rich_progress_bars': False,
    'enable_get_object_locations_for_metrics': False,
    'write_file_retry_on_errors': (
        'AWS Error INTERNAL_FAILURE', 'AWS Error NETWORK_CONNECTION', 'AWS Error SLOW_DOWN',
        'AWS Error UNKNOWN (HTTP status 503)',
    ),
    'warn_on_driver_memory_usage_bytes': 2147483648,
    'actor_task_retry_on_errors': False,
    'actor_init_retry_on_errors': False,
    'actor_init_max_retries': 3,
    'max_consecutive_actor_init_deaths': 0,
    'retried_map_errors': False,
    'max_map_retries': 0,
    'op_resource_reservation_enabled': True,
    'op_resource_reservation_ratio': 0.5,
    'output_backpressure_guard_release_interval_s': None,
    'max_errored_blocks': 0,
    'execution_no_progress_timeout_s': 1800,
    'log_internal_stack_trace': False,
    'raise_original_map_exception': False,
    'print_on_execution_start': True,
    's3_try_create_dir': False,
    'wait_for_min_actors_s': -1,
    'max_tasks_in_flight_per_actor': None,
    'retried_io_errors': [
        'AWS Error INTERNAL_FAILURE', 'AWS Error NETWORK_CONNECTION', 'AWS Error SLOW_DOWN',
        'AWS Error UNKNOWN (HTTP status 503)', 'AWS Error SERVICE_UNAVAILABLE',
    ],
    'lance_config': _Config('LanceConfig',
        read_fragments_errors_to_retry=['LanceError(IO)'],
        read_fragments_max_attempts=10,
        read_fragments_retry_max_backoff_s=32,
        write_fragments_errors_to_retry=['LanceError(IO)'],
        write_fragments_max_attempts=10,
        write_fragments_retry_max_backoff_s=32),
    'iceberg_config': _Config('IcebergConfig',
        write_file_max_attempts=10,
        write_file_retry_max_backoff_s=32,
        catalog_max_attempts=5,
        catalog_retry_max_backoff_s=16,
        catalog_retried_errors=list(_RETRIED_ERRORS),
        read_file_tasks_sequentially=True),
    'delta_config': _Config('DeltaConfig',
        commit_max_attempts=5,
        commit_retry_max_backoff_s=16,
        commit_retried_errors=list(_RETRIED_ERRORS),
        credential_refresh_enabled=True),
    'enable_per_node_metrics': False,
    'enable_stats_summary_collection': False,
    'override_object_store_memory_limit_fraction': None,
    'memory_usage_poll_interval_s': 1,
    'dataset_logger_id': None,
    'issue_detectors_config': _Config('IssueDetectorsConfiguration',
        hanging_detector_config=_Config('HangingExecutionIssueDetectorConfig',
            op_task_stats_min_count=10,
            op_task_stats_std_factor=10,
            detection_time_interval_s=30.0),
        hash_shuffle_detector_config=_Config('HashShuffleAggregatorIssueDetectorConfig',
            detection_time_interval_s=30,
            min_wait_time_s=300),
        high_memory_detector_config=_Config('HighMemoryIssueDetectorConfig', detection_time_interval_s=30),
        detectors=['HashShuffleAggregatorIssueDetector', 'HighMemoryIssueDetector']),
    'isolate_read_workers': False,
    'downstream_capacity_backpressure_ratio': 2.0,
    'enable_dynamic_output_queue_size_backpressure': False,
    'enable_lineage_reconstruction_resource_accounting': True,
    'enforce_schemas': False,
    'pandas_block_ignore_metadata': False,
    'batch_to_block_arrow_format': True,
    'checkpoint_config': None,
    'custom_execution_callback_classes': [],
    'default_map_logical_memory_enabled': False,
    'enable_ray_data_reconstruction': False,
    'object_store_reservation_overshoot_ratio': None,
    'object_store_memory_pressure_fraction': None,
    'execution_callback_classes': [
        'ExecutionIdxUpdateCallback', 'IssueDetectionExecutionCallback', 'ResourceAllocatorPrometheusCallback',
    ],
    'hash_shuffle_compression': 'zstd',
    'use_external_hash_shuffle': False,
}
