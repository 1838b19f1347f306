"""The rewrite, in order. Each transform handles one concern; the order matters where one
reads what another decided (the process-group setup goes last so that it defines exactly the
names the other edits use).

`PREPASSES` rewrite a script into one the DDP pipeline understands (apex amp into native AMP)
before the analysis reads it; a script that is already distributed keeps only their edits."""

from __future__ import annotations

from ddpify.convert.transforms.apex_amp import ApexToNative
from ddpify.convert.transforms.batch_size import BatchSize
from ddpify.convert.transforms.checkpoints import Checkpoints
from ddpify.convert.transforms.data_parallel import RemoveDataParallel
from ddpify.convert.transforms.devices import Devices
from ddpify.convert.transforms.downloads import Downloads
from ddpify.convert.transforms.loader_length import LoaderLength
from ddpify.convert.transforms.local_rank_arg import LocalRankArgument
from ddpify.convert.transforms.metrics import ReduceMetrics
from ddpify.convert.transforms.no_sync import GradientSync
from ddpify.convert.transforms.process_group import ProcessGroup, Teardown
from ddpify.convert.transforms.rank_guard import RankZeroGuards
from ddpify.convert.transforms.run_names import SharedRunNames
from ddpify.convert.transforms.sampler import Sampler
from ddpify.convert.transforms.seeds import SeedPerRank
from ddpify.convert.transforms.set_epoch import SetEpoch
from ddpify.convert.transforms.stop_together import StopTogether
from ddpify.convert.transforms.sync_bn import SyncBatchNorm
from ddpify.convert.transforms.wrap_model import WrapModel

PREPASSES = (ApexToNative,)

PIPELINE = (
    LocalRankArgument,
    Devices,
    RemoveDataParallel,
    SyncBatchNorm,  # before the wrap: its statements go right before DDP(...)
    WrapModel,
    Downloads,
    SharedRunNames,
    Sampler,
    SeedPerRank,  # after the sampler: a loader made again before the training loop comes first
    SetEpoch,
    BatchSize,
    LoaderLength,
    GradientSync,
    ReduceMetrics,
    StopTogether,
    Checkpoints,
    RankZeroGuards,
    ProcessGroup,
    Teardown,
)
