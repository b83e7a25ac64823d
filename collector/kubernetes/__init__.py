"""Kubernetes: pods, nodes and Kueue Workloads read by list and watch (:mod:`.collector`),
what the objects mean (:mod:`.objects`, :mod:`.queue`), the state between them (:mod:`.tracker`,
:mod:`.state`), and the kubelet's pod-resources API that labels GPU samples with pods
(:mod:`.podresources`). The source is
:class:`collector.kubernetes.collector.KubernetesCollector`."""
