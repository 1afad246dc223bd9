"""Expert and tensor parallelism: one model sharded over N processes (gloo on CPU, NCCL on GPUs).

    sharding.py        how every weight is split per rank (ShardPlan, shard_model)
    collectives.py     the all_reduce the sharded graph calls, timed on demand
    graph.py           the sharded forward: the same named ops plus the reduce points
    engine.py          ShardedEngine: Engine's prefill/decode API, one rank of the world
    ondevice_synth.py  a rank's shard of a random model drawn directly on its device (no file)
    launch.py          spawning the N ranks and driving them (ShardedPool)
    worker.py          what runs inside each rank
    amdahl.py          collective share of the step, the Amdahl fit and its crossover
    scaling.py         measuring step and collective time over several world sizes
    runbench.py        the multi-GPU figures (prefill / decode at depth) for the ledger
"""
