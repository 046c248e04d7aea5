"""This host's GPUs, as the worker sees them:

    holds      discovery through nvidia-smi, and which jobs hold them: GPU shares, the host gate of
               ranked runs, profiler turns (lock files)
    access     how a job's container reaches exactly its GPUs (the NVIDIA runtime, or device nodes)
    nvml       NVML through ctypes: processes on a GPU, memory shares, clocks and throttling
    counters   whether jobs may read the GPU's performance counters

Nothing here names a job's run or an executor: ``run`` and ``executors`` sit above (.importlinter).
"""
