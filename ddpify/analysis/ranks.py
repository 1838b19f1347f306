"""How scripts spell ranks: the names, calls and environment variables that hold one."""

from __future__ import annotations

# The last part of a name that holds a rank (`args.local_rank`, `self.rank`, `ddp_rank`).
RANK_NAMES = {"rank", "local_rank", "global_rank", "world_rank", "node_rank", "ddp_rank", "ddp_local_rank", "gpu_rank"}
# Names that hold the node-local rank (the GPU index) rather than the global rank.
LOCAL_RANK_NAMES = {"local_rank", "ddp_local_rank", "gpu", "gpu_id", "gpu_index", "device_id", "local_process_index", "lrank"}
# Names that hold the global rank whatever they were assigned from. A bare `rank` is not one
# of them: under `mp.spawn(main, ...)` it is the index on this node.
GLOBAL_RANK_NAMES = ("global_rank", "world_rank", "ddp_rank")
# The last part of a name that holds "this is rank 0" (`master_process = rank == 0`).
MAIN_PROCESS_NAMES = {
    "is_main_process",
    "main_process",
    "is_main",
    "is_master",
    "master_process",
    "is_master_process",
    "is_rank_zero",
    "is_rank0",
    "is_global_zero",
    "is_local_main_process",
}

GLOBAL_GET_RANK = {"torch.distributed.get_rank", "torch.distributed.distributed_c10d.get_rank"}
LOCAL_GET_RANK = {"torch.distributed.get_node_local_rank", "torch.cuda.current_device"}
# Calls whose value is a rank.
GET_RANK = GLOBAL_GET_RANK | {"torch.distributed.get_node_local_rank"}

# The variables torchrun sets; their names in a file mark it distributed.
RANK_ENV = {"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK"}
# What each launcher sets: torchrun, SLURM, Open MPI, MPICH / Intel MPI.
GLOBAL_RANK_ENV = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}
LOCAL_RANK_ENV = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}
