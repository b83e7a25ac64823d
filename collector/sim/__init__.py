"""A simulated GPU cluster that emits the same records as the real sources: its configuration
(:mod:`.config`), nodes and GPUs (:mod:`.cluster`), the scheduler (:mod:`.engine`), measured
utilisation shapes (:mod:`.samples`, ``data/``) and the source (:mod:`.simulator`)."""
