-- Per GPU (or MIG instance) and every hour overlapping [lo, hi), from the hourly minute rollup
-- (gpu_minutes_1h), over the minutes that have samples:
--   used   the hour's used GPU-hours: the minutes' mean utilisations / 60;
--   k, u   the minutes (of the hour, 0-59) and their mean utilisation (0 without a
--          utilisation sample);
--   mk     the measured minutes: those with a utilisation sample;
--   whole  1 when all 60 minutes are low (lk is then empty);
--   lk     otherwise the low minutes: with utilisation samples, all of them under {threshold}.
-- The hour's lowest and highest utilisation settle most hours (nothing low; all low) without
-- looking at their minutes one by one.
-- The stored minutes, by minute of the hour: minute_util holds (minute, utilisation sum,
-- counts) with counts = utilisation samples x util_sample (2^32) + samples, and minute_max
-- (minute, highest utilisation); see migrations 0027 and 0028.
-- Included by ledger_usage.sql; ledger_minutes_raw.sql gives the same rows from raw samples.
WITH 4294967296 AS util_sample
SELECT cluster, gpu_uuid, mig_instance, h, arraySum(u) / 60 AS used, k, u,
       if(util_samples = samples, k, arrayFilter((m, c) -> c >= util_sample, k, counts)) AS mk,
       whole,
       if(maybe_low AND NOT whole,
          arrayFilter((m, c, y) -> c >= util_sample AND y < {threshold:Float64},
                      k, counts, highest), []) AS lk
FROM (
    SELECT cluster, gpu_uuid, mig_instance, ts AS h, minute_util.1 AS k,
           minute_util.3 AS counts, minute_max.2 AS highest, util_samples, samples,
           arrayMap((s, c) -> if(c >= util_sample, s / intDiv(c, util_sample), 0.),
                    minute_util.2, counts) AS u,
           coalesce(util_min < {threshold:Float64}, 0) AS maybe_low,
           maybe_low AND util_max < {threshold:Float64} AND util_samples = samples
               AND length(k) = 60 AS whole
    FROM {db:Identifier}.gpu_minutes_1h FINAL
    WHERE (cluster = {cluster:String} OR {cluster:String} = '')
      AND ts >= toStartOfHour({lo:DateTime64(3)}) AND ts < {hi:DateTime64(3)}
)
