-- The ledger's utilisation column compressed with LZ4HC at level 2 instead of the default LZ4:
-- decoding it is the largest part of reading raw samples for a ledger, and LZ4HC's output,
-- with fewer and longer matches, decodes about 2x faster. Measured on 17.7 M samples of the
-- benchmark's cluster (utilisation in whole percent, as DCGM reports it): reading 0.08 s of CPU
-- against 0.17-0.23 s, 25 MiB against 41 MiB on disk, and inserting 4.1 s against 3.7 s (one
-- thread); higher levels compress several times slower (level 9: 16.8 s) for no faster reads.
-- Parts written before keep their codec until a merge rewrites them (OPTIMIZE TABLE ... FINAL
-- does it at once). Only the codec changes: the type and the MATERIALIZED expression stay as
-- migration 2 made them. Re-running it changes nothing.
ALTER TABLE ${db}.gpu_samples${local} ${on_cluster}
    MODIFY COLUMN util_ratio CODEC(LZ4HC(2))
