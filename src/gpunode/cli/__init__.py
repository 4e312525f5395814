"""The operator's `gpunode` command: argument parsing, output and calling inward. main
holds the subcommand table; each subcommand's module (inventory, explain, cdi, runtime,
profile, sim, provision, report) is imported only when it runs. What `gpunode runtime` does
is library code in gpunode.engines and gpunode.launch.firststage; no other package imports
gpunode.cli."""
