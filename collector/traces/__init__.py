"""Public GPU cluster traces (Alibaba openb v2023 and the v2025 DLRM serving trace) replayed as
inventory and job events (:mod:`.alibaba`)."""
