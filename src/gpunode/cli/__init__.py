"""The operator's `gpunode` command. main holds the subcommand table; each subcommand's
module (inventory, explain, cdi, runtime, profile, sim) is imported only when it runs.
install and engines/ are what `gpunode runtime` does."""
