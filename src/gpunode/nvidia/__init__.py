"""What gpunode knows about NVIDIA's driver, shared by the runtime, the hook and the CLI:
device numbers and nodes, PCI bus ids, the /proc/driver/nvidia files, the files each driver
capability brings, and NVML. Modules here import nothing heavy at load time: the container
start path uses them."""
