"""`gpunode watch`: the node's GPU health followed continuously, as a node_exporter textfile.

* ``metrics``  the series (the one table of their names, labels and help: the contract the
  alert rules read), rendered from a Snapshot;
* ``history``  the Xids each GPU had this boot, kept across a restart of the watch in a
  small bounded file (watch-history.json);
* ``state``    a cycle's Snapshot decided from the GPU records (gpunode.nvidia.health's
  judges, the same validate runs) and the history; the node-problem-detector verdict;
* ``kmsg``     /dev/kmsg followed one record at a time (a file of records in tests);
* ``service``  the process: the loop, the NVML cycle in a worker thread with a timeout, the
  lock, the textfile and state files, signals;
* ``cordon``   `watch cordon`'s decisions (the taint, the node's name, the kubectl commands
  a verdict calls for), pure;
* ``kubectl``  `watch cordon`'s process part: its inputs checked, kubectl run (argv lists).

``history``, ``state``, ``metrics``, ``kmsg`` and ``cordon`` are pure or touch only their
own files; only ``service`` runs a loop, starts a thread or handles a signal, and only
``kubectl`` runs another program.
"""
