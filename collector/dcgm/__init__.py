"""dcgm-exporter: scrape its ``/metrics`` text (:mod:`.promtext`), map DCGM fields to samples
(:mod:`.fields`, :mod:`.collector`) and derive GPU inventory from the labels (:mod:`.inventory`).
The source is :class:`collector.dcgm.collector.DcgmCollector`."""
