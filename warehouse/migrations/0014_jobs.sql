-- One row per job, folded from its events: attributes, submit/start times, latest state.
-- Read with GROUP BY cluster, job_id and the -Merge combinators (warehouse.queries.jobs).
CREATE TABLE IF NOT EXISTS ${db}.jobs${local} ${on_cluster}
(
    cluster LowCardinality(String),
    job_id String,
    name SimpleAggregateFunction(max, String),
    tenant SimpleAggregateFunction(max, LowCardinality(String)),
    org SimpleAggregateFunction(max, LowCardinality(String)),
    project SimpleAggregateFunction(max, LowCardinality(String)),
    user SimpleAggregateFunction(max, LowCardinality(String)),
    namespace SimpleAggregateFunction(max, LowCardinality(String)),
    pool SimpleAggregateFunction(max, LowCardinality(String)),
    queue SimpleAggregateFunction(max, LowCardinality(String)),
    priority SimpleAggregateFunction(max, Int32),
    priority_class SimpleAggregateFunction(max, LowCardinality(String)),
    workload_type SimpleAggregateFunction(max, LowCardinality(String)),
    gpu_model SimpleAggregateFunction(max, LowCardinality(String)),
    gpus_requested SimpleAggregateFunction(max, Float32),
    submitted_at SimpleAggregateFunction(min, Nullable(DateTime64(3, 'UTC'))),
    first_started_at SimpleAggregateFunction(min, Nullable(DateTime64(3, 'UTC'))),
    last_event_at SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    attempts SimpleAggregateFunction(max, UInt16),
    events SimpleAggregateFunction(sum, UInt64),
    -- The latest event and its reason; ties at the same instant go to the later lifecycle step.
    state AggregateFunction(argMax, LowCardinality(String), Tuple(DateTime64(3, 'UTC'), UInt8)),
    state_reason AggregateFunction(argMax, String, Tuple(DateTime64(3, 'UTC'), UInt8))
)
ENGINE = ${engine:AggregatingMergeTree}
ORDER BY (cluster, job_id)
SETTINGS non_replicated_deduplication_window = 10000
