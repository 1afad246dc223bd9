#!/usr/bin/env bash
# The GPU session in as few device calls as possible: install sparkops on the GPU machine, prove the CUDA
# registries, synthesize the 48B, time the ladder, run every GPU test and the per-op benchmarks.
#
#   bench/gpu_suite.sh STAGE [STAGE ...]
#     install     wheels from .whl/ (gguf, tomlkit: not on the image) + sparkops, editable, offline
#     registries  prove and select the CUDA registries by swap: all-torch (the baseline and the golden run of
#                 the 48B gate), fast (FAST_PAIRS: float32 kernels), fill (fast + a float32 prefill attention),
#                 bf16 (BF16_PAIRS); gate bf16 on the 48B and pick the best registry (bf16 if it passes) and its
#                 fused twin ([engine] fuse_projections)
#     synth       the 48B q4_k_m GGUF, once per machine, in $SUITE_TMP (default /tmp)
#     generate    text from the 48B: torch eager, fast through the captured CUDA graph
#     gate        check every other CUDA implementation; the captured-step gate on k3-nano (fast, bf16)
#     gate48      the 48B model gate of the fast registry (pinned; free-running at 4096) and of a bf16 cache
#     ladder      diagnose torch at 0, 4096, 32768 (recorded; the prediction of the next row); 48B decode there:
#                 torch eager vs the best registry through one CUDA graph per step; diagnose the best registry.
#                 Contexts filled once by the fill registry
#     diagnoses   the ladder's two diagnoses without its decode pair
#     prefill     48B prefill of 32768 tokens: torch vs the best registry for prefill, ABAB
#     prefill_lean  prefill 32768 under the bf16 registry alone, on the lean prerequisites (a row against the frontier)
#     ladder131k  the same decode pair at 131072; diagnose at 131072
#     rungs       the single steps, each its own row: torch -> fast (eager), fast eager -> fast graph,
#                 fuse_projections, cupy vs triton float32 attention, float32 vs bf16 kernels, a bf16 MLA cache
#     rungs7      session 7's rungs on lean prerequisites: the prefetch GPU tests and depth studies, then
#                 moe_experts=triton_prefetch, then linear=triton_prefetch, then moe_router=triton_prefetch, then
#                 attention=triton_splitk_wide, then the flat Q4_K GEMVs (their GPU tests and tile studies first; moe_experts, then linear), each its own
#                 row; the captured gate and a recorded diagnosis of the newest registry whose rung won
#     rungs8      session 8's step rebuilt by swaps (the rungs SUITE_TIMED names), then cupy_float for the Q6_K
#                 lm_head alone (linear@Q6_K), then for every linear, after its GPU tests (proofs8 runs them in the
#                 lane beside); the captured gate, a recorded diagnosis
#     prefill_diag  the chunk diagnosis of the prefill registry alone (diagnose --prefill-chunk 4096 at 0 and 28672)
#     rungs9      session 9's prefill rung on the lean prerequisites: linear, moe_experts = triton_dqmm (each weight
#                 decoded once to bf16, then cuBLAS / grouped GEMM) over the prefill registry, after its GPU tests
#                 (proofs9 runs them in the lane beside); the chunk diagnosed before (where missing) and after;
#                 then kda=triton_chunked over the newest winner (prefill ran the recurrent kernel); a 16384-token
#                 chunk study on the newest prefill registry that won
#     rungs10     session 10's prefill rungs over the prefill registry now (stage rungs9 rebuilds it first), each
#                 after its GPU tests, timed at 16384-token chunks against the chunk diagnosis of its base:
#                 moe_experts=triton_dqmm_fused (diagnosed after), then attention=triton_sdpa over the newest
#                 winner; the newest winner in one 32768-token forward and diagnosed; the prefill tune studies
#     proofs10    rungs10's GPU tests and the prefill tune studies (the lane beside rungs10)
#     rungs11     session 11's prefill rungs over the prefill registry rebuilt (rungs9 first; the fused MoE by swap):
#                 the tuned launch defaults (one arm, one forward of 32768), its diagnosis at 32768, then
#                 attention=triton_sdpa (cuDNN from an empty cache) and kda=triton_chunked_split, each a pair at 32768
#     proofs11    rungs11's GPU tests (fused MoE, SDPA against exact attention, split KDA, the retuned router and
#                 decode kernels): the lane beside rungs11
#     rungs11b    the split-KDA rung of rungs11 in the other lane, once rungs11 has made its base and diagnosis
#     tune11      the prefill tune studies (their first rows are session 11's defaults)
#     rungs12     session 12's prefill rung over the prefill registry rebuilt (rungs9 first; the fused MoE, the split
#                 KDA and SDPA by swap, SUITE_TIMED naming their rows): its 32768 diagnosis, then
#                 kda=triton_chunked_split_tf32 as a pair at 32768 after its GPU tests
#     proofs12    rungs12's GPU tests and the tf32 split prepare's launch study: the lane beside rungs12
#     rungs13     the prefill registry rebuilt through session 12's tf32 row (the chain of timed rungs, each swap over the
#                 one before), its 32768 diagnosis, then kda=triton_chunked_split_tf32_bf16scratch as a pair
#     proofs13    rungs13's GPU tests: the lane beside rungs13
#     rungs13d    session 13's decode rung: the decode step rebuilt by swaps (decode_chain; SUITE_TIMED names its rows),
#                 its diagnosis at d=0, then linear@Q4_K=cupy_rowwarp as a pair at 0 and 32768 after its GPU tests
#     proofs13d   rungs13d's GPU tests: the lane beside rungs13d
#     proofs14d   rungs14d's GPU tests (tensor cores, float rows, row-warp): the lane beside rungs14d
#     rungs14d    the decode step rebuilt through session 13's row-warp rung, the row-warp GPU tests, the step now as one
#                 arm against the frontier (cupy_rowwarp's defaults changed after its row), its diagnosis at 0 and
#                 32768, then moe_experts=cupy_rowwarp as a pair, then linear@F16=cupy_floatrow as a pair after its
#                 GPU tests, predicted from their per-op record (bench/perop_factor.py), then linear@Q4_K=cupy_mma
#                 (the tensor cores) the same way, then moe_experts=cupy_mma
#     rungs15d    session 15's decode rungs: the step rebuilt through the row-warp rung, then linear@Q4_K=cupy_rowwarp_staged
#                 and moe_experts=cupy_rowwarp_staged (a warp a row from staged activations), each a pair at 0 and 32768
#                 after the row-warp proofs, predicted from their side-by-side record
#     rungs15r    session 15's router rung: the step rebuilt through the row-warp rung, then moe_router=cupy_rowwarp (one
#                 launch: a warp an expert's logit, the token's last block routes) as a pair at 0 and 32768 after its GPU
#                 tests (proofs15r runs them in the lane beside), predicted from its side-by-side record
#     rungs16d    session 16's decode rungs: the step rebuilt through the row-warp rung, then linear@Q4_K=cupy_rowhalf (the
#                 copy form in packed half2), then moe_experts=cupy_rowhalf (gate/up the same way), each a pair at 0 and
#                 32768 after their GPU tests (proofs16d in the lane beside), predicted from the side-by-side records
#     probe_mma   cupy_mma's pipe form at 4, 8 and 16 warps a tile (bench/probes/mma_pipe_warps.py): does occupancy bind?
#     probe_l2    the L2-prefetch decode probe (bench/probes/l2_prefetch.py) after its kernel's GPU tests
#     probe_gemv  where a small decode GEMV's time goes (bench/probes/gemv_anatomy.py): launch floor, plain read, GEMV
#     probe_ncu   Nsight Compute on one launch of each decode GEMV form (bench/probes/rowwarp_kernels.py), where ncu runs
#     rungs17d    session 17's decode rungs, each over the row-warp step: linear@Q4_K=cupy_rowwarp_copy2 (predicted
#                 from the side-by-side record), then add_rmsnorm and gated_rmsnorm = triton_pdl with linear@Q4_K=
#                 cupy_rowwarp_pdl (one rung: each norm lets its projection start; predicted from the PDL probe's savings
#                 a pair), then moe_experts=cupy_rowwarp_pdl (predicted from the MoE side-by-side), each a pair at 0
#                 and 32768 after its proof
#     probe_pdl   the copy form with programmatic dependent launch (its weight rows requested before it waits for
#                 the kernel before it): its GPU tests, then a chain of 24 dependent GEMVs plain and with PDL
#                 (bench/probes/pdl_chain.py)
#     probe_copy2 the copy form with its weight copy in two groups (decode the first half while the second lands): its
#                 GPU tests (bitwise the copy form) and the row-warp side-by-side with it as a column
#     probe_ncu_source_router  the step's PDL router (bf16 activations) with Nsight Compute's per-instruction stall
#                 samples (CSV; bench/probes/ncu_source_table.py)
#     probe_router_anatomy  the step's router after its norm with stages left out (RT_PROBE: no routing, no
#                 arrival, no read of x; the routing split into its outputs' writes, its loads, its scores and its
#                 picks) and at 1, 2, 4 warps a block (bench/probes/router_anatomy.py; ~45 s)
#     probe_gateup  the step's MoE gate/up with its x staging, its dots, its weight copies left out (source edits),
#                 64 PDL launches over rotated routings a graph (bench/probes/gateup_anatomy.py; ~60 s)
#     probe_router_code  each routing form's router (rt_route, sorted, merge rolled and unrolled) after its norm, the
#                 L2 warm and then flushed by a 96 MB read before each pair: whether a form's routing pays for its code
#                 when the step's weight streams leave none of it in the L2 (bench/probes/router_code.py; ~60 s)
#     probe_fold  the norm folds' kernels (MoE down, o_proj) with stages left out (RAN_PROBE: no norm, no arrival,
#                 the norm's loop form, the scalar norm of sessions 36-38), with and without PDL, beside the plain op
#                 (bench/probes/fold_anatomy.py)
#     probe_l2_hot  the step's kernels (Q8 tall GEMV, o_proj, MLA q, the MoE pair, the router) with their weights
#                 cold and L2-hot, bits compared (bench/probes/l2_hot.py; session 34's lead: prefetch ahead or not),
#                 and router -> experts -> q|k|v chains with the GEMV's weight prefetched on a side stream or not
#     probe_ncu_source_moe  the Q8 hidden pair's down, the pairs gate/up (x padded) and the down with its loads
#                 requested earlier, each launched alone, with
#                 Nsight Compute's per-instruction stall samples (CSV; bench/probes/ncu_source_table.py)
#     probe_ncu_source  the copy form's SASS with Nsight Compute's per-instruction stall samples (CSV), 12288 x 2304
#                 (NCU_SOURCE_KERNEL=rowcp2x: the copy2x form's instead)
#     probe_copy2x  copyx and copy2x (the copy and copy2 forms with each block's first activations requested before its
#                 weights): their GPU tests (bitwise the copy form) and the row-warp side-by-side with their columns
#     probe_xcast the same activations read by every block of a grid against each block its own
#                 (bench/probes/x_broadcast.py): the copy form's x stall, contention or latency?
#     rungs18d    session 18's decode rungs over the row-warp step: the norm-PDL pair and the PDL experts again, their
#                 kernels now reading x through L1 after the wait (session 17: from L2, both regressions), after the
#                 PDL proof and probe, forecast from the probe's pair savings and the MoE side-by-side; then both in
#                 one registry (each forecast ~1.3%, inside the 2% band)
#     probe_pdl_floor  a chain of small dependent Triton kernels, plain and with PDL through every kernel
#                 (bench/probes/pdl_floor.py): the saving a launch, times the step's 360 launches
#     rungs18e    session 18's attention rung over the row-warp step: attention=cupy_splitk_bf16_active (the slices a
#                 short context leaves empty neither written nor read; the same bits) after its proof, forecast from
#                 its side-by-side at pos 63
#     probe_attn_active  that rung's proof alone (its GPU tests, its gate, its side-by-side): the lane beside rungs18e
#     probe_persist  a chain of 24 dependent bf16 GEMVs (2304 x 2304) as 24 launches and as one persistent launch
#                 (weights prefetched while a grid barrier waits; and without the prefetch) (bench/probes/
#                 persistent_chain.py): what a step that stays on the device could give; since session 45 also the
#                 warp rings (each warp streams its rows through shared-memory slots across layers, no block
#                 barrier), traced, and the same chain again at 1152 rows a GEMV; since session 46 the two runs'
#                 best proven persistent form at 1152 rows as a stage's latency in persistent_forecast.py's model
#                 of the 48B's persistent step (tok/s, PNG)
#     probe_persist_floor  the same chain at 8 and 264 rows a GEMV: a dependent stage's cost with almost no bytes
#     probe_q4k   a persistent chain of the 48B step's own stages as Q4_K GEMVs (a KDA layer with MoE, six stages of
#                 5-21 MB, four layers) on Q8 activations, one launch a stage against one paced persistent launch
#                 (bench/probes/q4k_chain.py, session 49): a stage's latency where the forecast needs it, traced
#     probe_iq1s  the IQ1_S mix's one-token weight kernels (KDA q|k|v, o_proj, MLA q|kv_a, the dense FFN, the
#                 experts) at the 48B's shapes, every candidate implementation side by side, each output judged by
#                 its own claim (bench/probes/iq1s_ops.py, session 50): a registry swap's size for the IQ1_S row
#     rungs19     session 19's decode rung over the row-warp step: [engine] side_stream (a KDA layer's gate projections
#                 on a second CUDA stream, concurrent with q/k/v and the short conv) after its GPU tests and the
#                 captured gate of a k3-nano in the 48B's mix, forecast from half the F16 gate GEMVs' time hidden
#     proofs19    that rung's GPU tests alone (tests/engine/test_side_stream.py): the lane beside rungs19
#     rungs20     session 20's decode rungs: [engine] side_priority (the side stream at the device's highest
#                 priority) over the side-stream step after the side stream's proof and the captured gate; then
#                 add_rmsnorm=triton_pdl with moe_router=cupy_rowwarp_pdl over the row-warp step after its proof,
#                 forecast from the norm-and-router pairs' side-by-side
#     rungs21     the fused-norm decode rung (written in session 20, with no device time; its proofs passed in 21): [engine]
#                 fuse_kda_norm with the faster fused kda_norm (KDA's recurrence and output norm in one kernel:
#                 triton or triton_split) over the row-warp step, after its GPU tests and the captured gate,
#                 forecast from the chain-and-fused side-by-side
#                 then swiglu=triton (one launch where torch's SwiGLU is five) the same way from its pair's record
#     proofs21    those rungs' GPU tests alone (kda_norm's kernels, the engine option, swiglu): the lane beside rungs21
#     rungs22     the deep attention decode rung (written after session 21's device time): attention=
#                 cupy_splitk_bf16_deep (MLA's absorb, combine and up projection with their loads in flight at once,
#                 the same bits) over the row-warp step after its GPU tests, forecast from its side-by-side at pos 63
#     proofs22    that rung's GPU tests alone: the lane beside rungs22
#     rungs22all  session 22's step: the four rungs of sessions 20-22 that each timed `none` (S22_PAIRS, [engine]
#                 fuse_kda_norm) swapped together over the row-warp step and timed as one rung (session 22 timed it by
#                 hand: 1.035 / 1.034, again 1.038 / 1.034, a win); with SUITE_TIMED naming decode-s22-all, only made
#     rungs23     the earlier nones not in that step, together over it: [engine] fuse_low_rank (session 9: 1.009,
#                 1.010), side_stream (session 19: 1.007 / 1.008) and the PDL GEMVs and experts (session 18: 1.008 /
#                 1.008; with kda_norm=triton_split_pdl, the trigger those pairs had), after the GPU tests of the side
#                 stream, the fused norm and the deep attention (all first) and the captured gate; then each alone
#                 over the same step; then attention=cupy_splitk_bf16_deep_active (the deep and the active forms at
#                 once) over it, forecast from its side-by-side
#                 (one diagnosis of the base shared by all four pairs), so that the row says which of them carried it
#     rungs24     [engine] fuse_kda_gates (a KDA layer's f_b and g_b, two F16 GEMVs of ~1 MB, inside its fused
#                 recurrence and norm: kda_lowrank_norm; 40 launches a token fewer, 20 where fuse_low_rank made them
#                 one) with the faster of kda_lowrank_norm=triton_split / triton_split_pdl in its side-by-side, over
#                 the step now (the rungs23 registry when decode-s23-nones won here or SUITE_TIMED names it, else
#                 session 22's step; diagnosed, gated and timed again when that base moves), after its GPU tests and
#                 the captured gate, forecast from its record (kda_norm) and the F16 launches that go; stage rungs23
#                 runs its proof with its own when the call names both
#     proofs24    that rung's GPU tests alone (kda_lowrank_norm's kernels, the engine option): the lane beside rungs24
#     rungs25     four rungs over session 23's step (the rungs23 registry, made by swaps; SUITE_TIMED names its row),
#                 one diagnosis of it shared by all: first the chain (linear=triton_pdl and short_conv=triton_pdl
#                 together: the step's last two kinds of launch without PDL), then short_conv=triton_pdl alone (the
#                 fused q/k/v short conv, 20 launches a token, its window and taps requested before the wait), then
#                 linear=triton_pdl alone (the F16 gate GEMVs, 40 launches a token; the same bits as
#                 triton_lastblock; the Q4_K and Q6_K selections stay), each forecast from its side-by-side record,
#                 then [engine] fuse_kda_gates with kda_lowrank_norm=triton_split_pdl (the PDL form, not the faster
#                 one: session 24's triton_split lost, 0.980 / 0.982, ending a PDL chain), forecast from that form's
#                 figure in the fused gates' record; each after its GPU tests and its captured gate
#     proofs25    those rungs' GPU tests alone (the F16 PDL GEMVs', the PDL short conv's, the fused gates'): the lane
#                 beside rungs25
#     probe_ncu_iq1s  Nsight Compute on one launch of each kernel of the staged_flat and t2 IQ1_S experts and the t2
#                 GEMV (iq1s_ops.py alone on each kernel, the first matching launch, bf16)
#     rungs_iq1s  sessions 50-51's IQ1_S rungs at 131072, after probe_iq1s's GPU tests and figures: the IQ1_S
#                 step's GEMVs on the fastest Q8 form per op (linear@IQ1_S; SUITE_IQ1S_LINEAR pins one) over the step
#                 now with the IQ1_S experts on triton_prefetch, then its experts on the fastest Q8 pair per op
#                 (moe_experts@IQ1_S) over that; each left out where no form is faster per op, each --expect the
#                 probe's calls-weighted factor, each base diagnosed at 131072
#     proofs_fp8  rungs_fp8's GPU tests alone (the fp8 attention's bits, graph, and its side-by-side record)
#     probe_split the MLA splits (one-group, qreg, ring, l2pf, twin, bulk; SUITE_SPLIT_KERNELS names some) with their
#                 tile arithmetic, refills or tensor-core products left out (bench/probes/split_anatomy.py): what binds
#                 them at 131072 rows
#     proofs_twin rungs_twin's GPU tests alone (the twin split's bits, graph, its side-by-side record) and Nsight
#                 Compute on the first launch of the one-group and the twin split
#     proofs_bulk rungs_bulk's GPU tests alone (the bulk split's bits, graph, its side-by-side record) and Nsight
#                 Compute on the first launch of the one-group and the bulk split
#     proofs_qreg rungs_qreg's GPU tests alone (the queries-in-registers split against the reference, graph, its
#                 side-by-side record) and Nsight Compute on the first launch of the one-group and the qreg split
#     rungs_qreg  session 55's queries-in-registers split (attention=cupy_splitk_bf16_qreg_active_pdl) at 131072 as
#                 rungs_twin, over SUITE_QREG_IQ1S_BASE for the IQ1_S row
#     proofs_fp8_qreg the fp8 queries-in-registers split's GPU tests alone (the reference on fp8 values, graph, the
#                 side-by-side record against the bf16 and the fp8 one-group split) and Nsight Compute on it
#     proofs_l2pf the L2-prefetching split's GPU tests alone (its bits, graph, side-by-side record), Nsight Compute
#     proofs_ring the ring split's GPU tests alone (the qreg split's bits, graph, side-by-side record), Nsight Compute
#     rungs_split the fastest per op of the qreg, bulk, fp8 qreg, L2-prefetching and ring splits (each's record from
#                 its proofs on this machine), if x1.05 or more (SUITE_SPLIT_MIN), as its rungs stage;
#                 SUITE_SPLIT_IQ1S_BASE names the IQ1_S base
#     rungs_bulk  session 54's bulk split (attention=cupy_splitk_bf16_bulk_active_pdl) at 131072 as rungs_twin, over
#                 SUITE_BULK_IQ1S_BASE for the IQ1_S row
#     rungs_twin  session 54's twin split (attention=cupy_splitk_bf16_twin_active_pdl) at 131072 after its GPU tests:
#                 over the step now (Q4_K 48B), then over SUITE_TWIN_IQ1S_BASE (else the newest IQ1_S step), each
#                 base diagnosed at 131072, --expect from the tests' side-by-side record (perop-attntwin; none: out)
#     rungs_fp8   session 53's MLA cache in float8_e4m3fn at 131072, after its GPU tests (gpu-tests-fp8):
#                 attention=cupy_splitk_fp8_deep_active_pdl over the step now (Q4_K 48B), then over the newest IQ1_S
#                 step on the machine (SUITE_FP8_IQ1S_BASE), each base diagnosed at 131072, --expect from the
#                 tests' side-by-side record (perop-attnfp8), else by bytes (attention=1.68; SUITE_FP8_EXPECT)
#     frontier131k  issue #10's rows at 131072 (both mixes; the frontier there is sessions 8-9's steps): session
#                 22's step (or the newest timed after it), one graph per step, one arm against the frontier each
#     frontier_now  issue #10's rows at 0 and 32768 under the step now (the newest rung SUITE_TIMED or this machine
#                 timed as a win, each rung's registry made by its swaps here), one arm against the frontier: a
#                 machine kind's figures for a step whose rungs another kind timed
#     rungs26     moe_experts=cupy_rowwarp_pdl_shared over the step now (session 23's, or a rungs25 rung that won):
#                 the shared expert's gate/up rows requested before the wait for the router, after its GPU tests
#                 (gpu-tests-exp-shared: the bits, and the norm-router-experts chain timed) and its captured gate;
#                 forecast from that chain's record
#     proofs26    rungs26's GPU tests alone, the lane beside rungs26
#     rungs26w    moe_experts=cupy_rowwarp_pdl_wide over the step now, as rungs26: down's whole row requested before
#                 its wait for gate/up (gpu-tests-exp-wide, then the chain's record perop-expwide-bfloat16.json)
#     proofs26w   rungs26w's GPU tests alone
#     probe_ncu_moe  Nsight Compute on one launch of each one-token expert kernel pair (bench/probes/moe_kernels.py)
#     rungs27     moe_experts=cupy_rowwarp_pdl_split over the step now, as rungs26: down four warps an output (its
#                 sum in another order: the tolerance row), after gpu-tests-exp-split and its record
#                 perop-expsplit-bfloat16.json
#     proofs27    rungs27's GPU tests alone
#     rungs27q    moe_experts=cupy_rowwarp_pdl_q8 (or _q8_split over a split step that won) over the step now:
#                 gate/up on Q8 activations and __dp4a (the act_q8 row), after gpu-tests-exp-q8 and its record
#                 perop-expq8-bfloat16.json
#     proofs27q   rungs27q's GPU tests alone
#     rungs28     moe_experts=cupy_rowwarp_pdl_q8_hidden over the step now: the Q8 gate/up writing the hidden vector
#                 in Q8 (groups of 8), down on it by __dp4a (the act_q8 row), after gpu-tests-exp-q8h and its record
#                 perop-expq8h-bfloat16.json
#     proofs28    rungs28's GPU tests alone
#     rungs29     linear@Q4_K=cupy_rowwarp_pdl_q8 over the step now: the Q4_K GEMVs on Q8 activations and __dp4a
#                 (the act_q8 row), after gpu-tests-linear-q8 and its record perop-rowq8-bfloat16.json
#     proofs29    rungs29's GPU tests alone
#     rungs30     moe_experts=cupy_rowwarp_pdl_q8_pipe over the step now: the Q8 hidden pair with its gate/up pipelined
#                 through stages of shared memory, a few blocks an SM (the same bits), after gpu-tests-exp-q8p and its
#                 record perop-expq8p-bfloat16.json
#     proofs30    rungs30's GPU tests alone
#     rungs31     moe_experts=cupy_rowwarp_pdl_q8_pairs over the step now: the Q8 hidden pair with a lane a whole
#                 sub-block pair in gate/up's dot loop (1.66 instructions a weight against 2.7; the act_q8 row), after
#                 gpu-tests-exp-q8w and its record perop-expq8w-bfloat16.json
#     proofs31    rungs31's GPU tests alone
#     rungs32     linear@Q6_K=cupy_x16_pdl over the step now: the lm_head's Q6_K GEMV on 16-bit activations in two
#                 int8 planes and __dp4a (the bf16 row), after gpu-tests-x16 and its record perop-x16-bfloat16.json
#     proofs32    rungs32's GPU tests alone
#     rungs33     moe_experts=cupy_rowwarp_pdl_q8_hidden_cp over the step now: the Q8 hidden pair with down in a copy
#                 form (each warp's rows copied into shared memory before the wait, dotted group by group as they land:
#                 the same bits), after gpu-tests-exp-q8c and its record perop-expq8c-bfloat16.json
#     proofs33    rungs33's GPU tests alone
#     rungs34     the nones stacked over the step now: moe_experts=cupy_rowwarp_pdl_q8_pairs (session 29's none; its
#                 copy-down pair _q8_pairs_cp when decode-s33-exp-q8c won) with linear@Q4_K=cupy_rowwarp_pdl_q8
#                 (session 28's none), one rung, after both GPU tests and their records (perop-expq8c, perop-rowq8)
#     proofs34    rungs34's GPU tests alone
#     rungs35     the Q8 down's expert ids read once a warp, over the step now: moe_experts=cupy_rowwarp_pdl_q8_hidden_ld
#                 (its _q8_pairs_ld form when decode-s34-stack won: the step's experts are then the pairs pair), the
#                 same bits, after gpu-tests-exp-q8l and its record perop-expq8l-bfloat16.json
#     proofs35    rungs35's GPU tests alone
#     rungs36     [engine] fuse_router_norm with add_rmsnorm_router=cupy_rowwarp_pdl over the step now: a MoE layer's
#                 residual add, FFN norm and router in one PDL launch (the tolerance row norm_router), after
#                 gpu-tests-norm-router and its record perop-normrouter-bfloat16.json (the chain against the fused kernel)
#     proofs36    rungs36's GPU tests alone
#     rungs37     the router's routing tail shortened, over the step now: moe_router=cupy_rowwarp_pdl_sorted (the biases
#                 in shared memory before the wait, each routing lane's experts sorted once), the same bits, after
#                 gpu-tests-router-sorted and its record perop-routersort-bfloat16.json
#     proofs37    rungs37's GPU tests alone
#     rungs38     the short Q4_K GEMVs (o_proj) launched plainly, over the step now when it runs the Q8 GEMVs:
#                 linear@Q4_K=cupy_rowwarp_pdl_q8_shortplain (the same bits), after gpu-tests-q8-shortplain and its
#                 record perop-q8plain-bfloat16.json
#     proofs38    rungs38's GPU tests alone
#     rungs39     the Q8 GEMV for the tall weights, the float warp form for the short ones (o_proj), over the step now:
#                 linear@Q4_K=cupy_rowwarp_pdl_q8_tall, after gpu-tests-q8-tall and its column in
#                 perop-rowq8-bfloat16.json
#     proofs39    rungs39's GPU tests alone
#     rungs40     [engine] fuse_conv_kda with short_conv_kda_norm=triton_split_pdl over the step now: a KDA layer's
#                 short conv, recurrence and output norm in one PDL launch (the conv's launch leaves the chain), after
#                 gpu-tests-conv-kda and its record perop-convkda-bfloat16.json (the chain against the fused kernel)
#     proofs40    rungs40's GPU tests alone
#     rungs41     [engine] shared_expert_side over the step now: a MoE layer's shared expert as a dense SwiGLU FFN on
#                 the side stream beside the router and the routed experts (moe_experts then runs 8 of the 48B's 9
#                 experts' rows), after gpu-tests-shared-side; forecast x1.125 on moe_experts (the routed kernels'
#                 share of the rows), which bench/probes/critical_path.py puts at x1.039 on session 33's H100 step
#     proofs41    rungs41's GPU tests alone
#     rungs42     [engine] gates_first with fuse_conv_kda (short_conv_kda_norm=triton_split_pdl) over the step now: a
#                 KDA layer's gate-input GEMV first on the main line (its bytes before the tall GEMV's), the conv in
#                 the recurrence's kernel; neither pays alone (critical_path.py: x0.98 and x1.00), together x1.027
#                 forecast; after gpu-tests-gates-first and gpu-tests-conv-kda (its record perop-convkda)
#     proofs42    rungs42's GPU tests alone
#     rungs43     add_rmsnorm=triton_pdl_wait over the step now: the residual add and norm launched as a PDL dependent
#                 (it starts while the o_proj or the MoE down runs, requests its gain, then waits), the same bits as
#                 the step's triton_pdl; after gpu-tests-norm-wait and its record perop-normwait-bfloat16.json (the
#                 o_proj-and-norm pair under each, less the GEMV alone: the norm's own time in the chain)
#     proofs43    rungs43's GPU tests alone
#     rungs44     attention=cupy_splitk_bf16_deep_pdl over the step now: the MLA decode's four kernels launched with
#                 programmatic dependent launch (the absorb's and the up projection's weights requested before their
#                 waits; the o_proj after them let start early), the same bits as the step's deep form; after
#                 gpu-tests-attn-pdl and its record perop-attnpdl-bfloat16.json (cat, attention, o_proj under each,
#                 less the cat and o_proj alone)
#     proofs44    rungs44's GPU tests alone
#     rungs45     rungs43's and rungs44's changes in one pair over the step now (both keep the step's bits; each is
#                 forecast at 1-2%, about the noise band, so together they are more likely to be told from a tie):
#                 add_rmsnorm=triton_pdl_wait and attention=cupy_splitk_bf16_deep_pdl, after both proofs, --expect from
#                 both records, --forecast from both changes at once
#     proofs45    rungs45's GPU tests alone (rungs43's and rungs44's)
#     rungs46     [engine] fuse_moe_norm with moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm over the step now:
#                 each MoE layer's experts and the next block's residual add and norm as one op (the step's Q8 hidden
#                 pair, the norm done by the down's last block to finish: one launch fewer a layer); after
#                 gpu-tests-moe-norm and its record perop-moenorm-bfloat16.json (the norm, router, experts and closing
#                 norm chain under each, less the chain cut after the router: --expect on moe_experts; the fused
#                 column less the chain cut after the experts: the down's longer tail, the forecast's --shift)
#     proofs46    rungs46's GPU tests alone
#     rungs47     [engine] fuse_oproj_norm with linear_add_rmsnorm=cupy_rowwarp_pdl_norm over the step now: every
#                 attention block's o_proj and the FFN's residual add and norm as one op (the step's warp-form GEMV, the
#                 norm done by its last block to finish); after gpu-tests-oproj-norm and its record
#                 perop-oprojnorm-bfloat16.json (the o_proj-and-norm pair under each, less the GEMV alone: --expect on
#                 add_rmsnorm for the 27 of its 54 calls it folds; the fused column less the GEMV's: the forecast's
#                 --shift)
#     proofs47    rungs47's GPU tests alone
#     rungs48     rungs46's and rungs47's changes in one pair over the step now (both folds: every residual-add norm of a
#                 decode step but the dense layer's closing one in the kernel before it), after both proofs, --expect
#                 from both records, --forecast from both changes at once
#     proofs48    rungs48's GPU tests alone (rungs46's and rungs47's)
#     rungs49     the step's gaining nones stacked in one pair over the step now, as session 23's were: rungs45's PDL
#                 stack (x1.018 twice, session 37) with moe_experts=cupy_rowwarp_pdl_q8_pairs (x1.014, session 29),
#                 the one gaining none the step lacks (`sparkops ledger nones`); after rungs45's proofs and
#                 gpu-tests-exp-q8w, --expect from the three records, --forecast from the three changes at once
#     proofs49    rungs49's GPU tests alone
#     rungs50     moe_experts=cupy_rowwarp_pdl_q8_pairs_ld over the step now when its experts are the pairs pair
#                 (rungs49's): the down's expert ids and routing weights read once a warp (the same bits); session 30's
#                 rungs35 timed it x1.014 / x1.012 over the s34 stack (a none), and `sparkops ledger nones` lists it as
#                 the one gaining none the s49 step lacks; after gpu-tests-exp-q8l and its record perop-expq8l
#     proofs50    rungs50's GPU tests alone
#     rungs51     the xpf forms over the step now where it runs their plain forms (the s49 step): linear@Q4_K=
#                 cupy_rowwarp_pdl_q8_tall_xpf with moe_experts=cupy_rowwarp_pdl_q8_pairs_xpf in one pair, the o_proj
#                 GEMV and the MoE down prefetching their activations into L1 right after the PDL wait (the same bits);
#                 after gpu-tests-xpf and its records perop-q8xpf, perop-expxpf
#     proofs51    rungs51's GPU tests alone
#     rungs52     linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xr with moe_experts=cupy_rowwarp_pdl_q8_pairs_ld over the step now
#                 where it runs their plain forms (the s49 step), in one pair: the o_proj-sized GEMVs loading x into
#                 registers two rounds at a time after the wait (the same bits), stacked with rungs50's none (x1.015
#                 on an H100, x1.019 / x1.020 on an H200); after gpu-tests-xregs and gpu-tests-exp-q8l and their
#                 records perop-q8xr, perop-expq8l
#     proofs52    rungs52's GPU tests alone
#     rungs53     moe_experts=cupy_rowwarp_pdl_q8_pairs_hs over the step now where its experts are the ids-once pairs
#                 pair (the s52 step): the down reading the hidden vector from shared memory, copied once a block
#                 right after the wait (the same bits); after gpu-tests-exp-hs and its record perop-exphs
#     proofs53    rungs53's GPU tests alone
#     rungs54     moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf over the step now where its experts are the ids-once pairs
#                 pair (the s52 step): the down asking for its later groups' weight lines in the L2 before its wait,
#                 gate/up the shared expert's (the same bits); after gpu-tests-exp-l2pf and its record perop-expl2pf
#     proofs54    rungs54's GPU tests alone
#     rungs55     moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf with attention=cupy_splitk_bf16_deep_active_pdl over the step
#                 now where it runs their plain forms (the s52 step), in one pair: rungs54's none (x1.012 / x1.011,
#                 then x1.011 / x1.013 on an H100) stacked with the PDL attention skipping a short context's empty
#                 slices (the same bits); after gpu-tests-exp-l2pf and gpu-tests-attn-act-pdl and their records
#                 perop-expl2pf, perop-attnactpdl
#     proofs55    rungs55's GPU tests alone
#     rungs56     moe_router=cupy_rowwarp_pdl_merge over the step now where it runs cupy_rowwarp_pdl (the s55 step): the
#                 routing's picks by a sorting network and a butterfly merge of the lanes' lists, no pick rounds (the
#                 same bits); after gpu-tests-router-merge and its record perop-routermerge
#     proofs56    rungs56's GPU tests alone
#     rungs57     moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_grouped over the step now where it runs the l2pf pair (the
#                 s55 step): gate/up's weight copies in three commit groups of super-blocks, each dotted as it lands
#                 (the same bits); after gpu-tests-gu-grouped and its record perop-expgrp
#     proofs57    rungs57's GPU tests alone
#     rungs58     moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_streamed over the step now where it runs the l2pf pair:
#                 rungs57's grouped gate/up with one group requested ahead, each later one once the one before has
#                 landed (the same bits); after gpu-tests-gu-streamed and its record perop-expstr
#     proofs58    rungs58's GPU tests alone
#     probe_timeline_now  the step now and every newer rung's registry made on this machine replayed kernel by kernel
#                 with each kernel's own time (bench/probes/step_timeline.py; ~25 s a registry)
#     probe_timeline24  session 23's and 22's steps and rungs25's registries (those made) replayed kernel by kernel
#                 with each kernel's own time (bench/probes/step_timeline.py; ~20 s a registry)
#     probe_timeline  one replayed decode step kernel by kernel (bench/probes/step_timeline.py) under the row-warp
#                 step, with the side stream and with its priority: concurrency, slowdowns, the idle gaps
#     probe_timeline23  session 22's step and session 23's replayed kernel by kernel at d=0 (step_timeline.py, its
#                 kernel-by-kernel comparison): where session 23's 1.095 went, for ~200 s
#     rungs17e    session 17's second decode rung over the row-warp step: linear@Q4_K=cupy_rowwarp_copy2x after its
#                 proof, predicted from the side-by-side's record
#     probe_router  the same on the routers (triton_prefetch, cupy_rowwarp) with float32 and bf16 activations
#                 (bench/probes/router_kernels.py)
#     rungs6      session 6's rungs on lean prerequisites (torch + bf16 registries only): triton_lastblock (one
#                 launch per reduction), then fuse_short_conv, then linear=triton_pdl (programmatic dependent
#                 launch); their GPU tests first; a recorded diagnosis; prefill
#     tests       every test marked gpu (GPU_TESTS="FILE ..." picks files)
#     tests1of2, tests2of2  the single-GPU test files in two halves of about equal time (bench/gpu_test_shard.py, from
#                 the seconds each file took last time: after a session, `python3 bench/gpu_test_shard.py --record
#                 X.xml ...` with its JUnit files), one per lane: ~160 s each in session 10's figures
#     opbench     per-op benchmarks, cupy / triton / torch side by side
#     tune        launch-shape studies of the Triton kernels (sparkops_triton._tune; TUNE_STUDIES picks them)
#     iq1s        the 48B iq1_s GGUF: synthesize, generate (torch eager; fast through the graph)
#     iq1s131k    the IQ1_S 48B decode at 131072 under the newest timed registry (now_reg; issue #10 IQ1_S target)
#     attn131k    cupy's bf16 attention in the newest timed registry (now_reg) at 131072, alone
#     parallel    two GPUs over NCCL: the 48B sharded (tensor + expert parallel) gated against one GPU, the
#                 collective share and Amdahl fit over worlds 1,2, and a recorded sharded bench; the same from
#                 weights drawn on each GPU (no file), the k3-2.8t path
#
# Lanes (a machine of 2 GPUs): SUITE_LANE=NAME runs the stages as one lane, with its own logs and results file
# ($OUT/results-NAME.tgz), so two lanes can share the machine, one per GPU (CUDA_VISIBLE_DEVICES). The
# registries and the 48B are made under a lock: the first lane that needs them makes them, the other waits.
#
# Plan for 30 minutes of device time (the machine keeps /tmp only while it is held, and only ~30 s after a call:
# issue the next call at once; the start-up counts too). Step costs seen on one H200 in session 5 (seconds):
# install 12, registries 158 (swaps: torch 21, fast 67, fill 15, bf16 26, cupy attention 13), synth 56, the bf16
# 48B gate 79, GPU tests 246 (one GPU: the NCCL tests skip), decode131k 311 (two 131072-token fills of 73 and 88 s),
# diagnose131k 104, diagnose torch at 3 depths 116, diagnose best at 3 depths 58, per-op attention 123,
# decode-fast-graph 168, decode-fuse 103; decode-fast-vs-bf16 was stopped at 121. Session 4 (two lanes at once on
# nvidia-h200-x2): prefill 32768 pair 382, per-op linear 72, kda 77, cupy 364.
# Session 5, one H200, back to back (the first fixed the fill: attention_prefill's naive-form history):
#   SUITE_BUDGET=565 bash bench/gpu_suite.sh install registries synth tests
#   SUITE_BUDGET=570 bash bench/gpu_suite.sh install ladder131k
#   SUITE_BUDGET=565 OPBENCH_FILES=attention bash bench/gpu_suite.sh install diagnoses opbench
#   SUITE_BUDGET=405 SUITE_SKIP="decode-torch-vs-fast decode-attn-cupy-vs-triton" bash bench/gpu_suite.sh install rungs
# Session 6, one H200: "install registries synth rungs" (565 s): registries 192, synth 62, bf16 48B gate 87; the
# rung decode-attn-cupy-bf16 at 32768,131072 needs ~400 s (two 48B gates, fills of 16 s and ~75 s per arm), it
# was stopped in its 131072 fill at 189 s; decode-linear-cupy (75 s) was refused by the 48B gate.
# Then, on a fresh machine, two calls of "install rungs6" (the second carries on): swap-torch 25, swap-bf16 76,
# synth 69, bf16 48B gate 88, swap-lastblock 32, its GPU tests 178, captured gates 29 + 17, decode-lastblock
# (d=0,32768, with the bit-identity reruns) 143, decode-convmerge (d=0) 144, diagnose-now 34; then tune 38.
# Session 7, one H200: a probe call (install + the lastblock/PDL GPU tests, 136 s); "install rungs7" on a fresh
# machine (565 s: swap-torch 24, swap-bf16 71, synth 64, bf16 48B gate 74, swap-lastblock 30, gpu-tests-prefetch 161,
# tune-prefetch 27, swap-moe-prefetch 32, swap-linear-prefetch 12, gate-captured 25), then warm: decode-moe-prefetch
# 97, decode-linear-prefetch 95, diagnose 20, prefill-best 70; iq1s131k 168 (synth 19); a fresh "rungs7" for the
# depth-1 MoE rung alone took 394 s.
# Session 8, two H200s (nvidia-h200-x2), back to back, the rungs in lane gpu0 and their proofs beside them in gpu1
# (run() lets the rungs7 lane wait for a proof the other lane is running instead of running it twice):
#   E='SUITE_TIMED="decode-lastblock decode-convmerge decode-moe-prefetch" SUITE_SKIP="tune-prefetch swap-linear-prefetch"'
#   $E GPU_TESTS="tests --ignore=tests/parallel" GPU_TESTS_K="not prefetch and not wide and not flat" \
#     bash bench/gpu_lanes.sh 565 "rungs7" "proofs7 tests"     # 566 s: prereqs 315 beside the proofs (prefetch 247,
#                                      # wide 29, flat 84, tune-flat 28); the other GPU tests stopped at the budget
#   $E GPU_TESTS=... GPU_TESTS_K=... bash bench/gpu_lanes.sh 565 "rungs7" "tests iq1s131k"   # 496 s: router rung 138,
#                                      # wide rung 142, diagnose 31 beside every other GPU test (445)
#   $E bash bench/gpu_lanes.sh 430 "attn131k" "iq1s131k"        # 229 s: cupy attention at 131072 (207) beside IQ1_S
#   then two direct calls (cupy attention at 0 / 32768 beside IQ1_S under it, 154 s; a diagnosis, 48 s)
# Session 9, two H200s, 7 calls, 1628 s: call 1 rungs8 beside proofs8+tests 566 s; call 2 rungs8 beside
#   prefill_lean+iq1s131k 350 s; then direct commands (bench/gpu-runs/2026-11-30-session9/README.md)
# Session 10, two H200s, 6 calls, 1656 s (bench/gpu-runs/2026-11-30-session10/README.md): call 1 "rungs9" beside
#   "proofs9 prefill_diag rungs8" 491 s (dqmm pair 2.91x; the chunked-KDA pair stopped at the budget); call 2 "rungs9"
#   beside "iq1s131k" 176 s (chunked KDA 1.47x, the 16384-token chunk); then direct calls (chunk study, the 16384-token
#   diagnosis, the GPU tests split over two GPUs by file)
# Next session (nvidia-h200-x2; on one GPU the lanes run in turn), fresh then warm:
#   E='SUITE_TIMED="prefill-dqmm prefill-kda-chunked prefill-chunk16k"'
#   $E bash bench/gpu_lanes.sh 565 "rungs9 rungs10" "proofs9 proofs10"  # GPU 0 makes the lean prerequisites
#                                      # (~235 s) and rebuilds the chunked-KDA prefill registry by swaps (~30 s; its
#                                      # rows are not timed again) while GPU 1 runs the dqmm, fused-MoE and SDPA GPU
#                                      # tests and the prefill tune studies (~250 s); then the 16384-token diagnosis
#                                      # (~25 s), the fused-MoE pair (~150 s with the chunk proofs), its diagnosis
#   $E bash bench/gpu_lanes.sh 565 "rungs10" "tests1of2 tests2of2"  # what the first left (the SDPA pair ~150 s,
#                                      # one 32768 chunk, a diagnosis) beside every single-GPU test (~320 s)
#   Then set the tune studies' winners as defaults (one-arm prefill rows against the frontier: a launch shape has
#   no second implementation to pair with) and the decode rungs (rungs8's step, SUITE_TIMED as session 9 wrote
#   it) as time allows.
# Session 11, two H200s: call 1 as planned above (491 s: the fused MoE 1.181x; the split KDA's bit test failed), call
#   2 "rungs10" beside "tests1of2 tests2of2" (the SDPA pair refused by the chunk proof; one 32768 forward 25210); a
#   direct `sparkops check --depths 16384` ran out its 200 s with no output. Then, fresh:
#   SUITE_TIMED="prefill-dqmm prefill-kda-chunked prefill-chunk16k prefill-moe-fused" \
#     bash bench/gpu_lanes.sh 470 "rungs9 rungs11" "proofs9 proofs11"   # 436 s: the prerequisites and swaps took
#                                      # 360 s (swap-bf16 95 cold, gate48-bf16 73, four prefill swaps 96), so no
#                                      # rung was timed; every proof passed; the 32768 diagnosis ran
# Next session (nvidia-h200-x2), fresh then warm; SUITE_PREFILL_BASE=bf16 skips choose_best's 48B gate (~75 s):
#   (each device command starts with: export SUITE_TIMED="prefill-dqmm prefill-kda-chunked prefill-chunk16k
#   prefill-moe-fused" SUITE_PREFILL_BASE=bf16; - written $E below)
#   $E bash bench/gpu_lanes.sh 565 "rungs9 rungs11" "proofs9 proofs11 rungs11b tune11"  # GPU 0: ~290 s of
#                                      # prerequisites and swaps, the tuned row (~70 s), the 32768 diagnosis (25), the
#                                      # SDPA pair (~90); GPU 1: the proofs (~260 s), then the split-KDA pair once GPU 0
#                                      # has made its base and diagnosis (~400 s in), the tune studies if time is left
#   $E bash bench/gpu_lanes.sh 565 "rungs11" "tests1of2 tests2of2"       # what the first left, beside every GPU test
#   then the decode rungs (rungs8's step) as time allows
# Session 12, two H200s: call 1 as planned above (426 s: tuned row 35.2k, SDPA 1.053x, split KDA 1.062x, no time for
#   the tune studies), call 2 "tests1of2 tests2of2" then SDPA over the split registry by hand (its bench lacked
#   --prediction), call 3 that pair with 4 repeats (tier none: 4 pairs cannot pass the sign test) beside tune11,
#   call 4 the pair with 6 repeats (39.4k, 1.059x). Then, fresh:
#   export SUITE_TIMED="prefill-dqmm prefill-kda-chunked prefill-chunk16k prefill-moe-fused prefill-kda-split-32k
#   prefill-sdpa-32k prefill-both-32k" SUITE_PREFILL_BASE=bf16;
#   bash bench/gpu_lanes.sh 565 "rungs9 rungs12 tests1of2" "proofs12 tests2of2"  # GPU 0: ~255 s rebuilding the
#                                      # prefill registry, its diagnosis, the tf32 pair (~80); GPU 1: the tf32 tests
#                                      # and launch study (~150), then half the GPU tests; what is left, warm, after
#   (ran in 544 s: the tf32 pair 1.039x, 41480 tok/s; tests1of2 did not fit, tests2of2 and the tf32 proofs passed)
# Session 13: five short calls on one H200 (the GEMV probe, then the row-warp kernels' GPU tests and side-by-side
#   timings as they were built), then two H200s, fresh then warm:
#   export SUITE_TIMED="<session 9's decode rungs and session 12's prefill rungs>" SUITE_PREFILL_BASE=bf16
#   bash bench/gpu_lanes.sh 560 "rungs13d" "proofs13d tests2of2"  # 427 s: prerequisites ~125 s, the decode chain's six
#                                      # swaps ~105, the diagnosis 22, the rung's swap and captured gate ~30; the pair
#                                      # was refused (its prediction lacked d=32768). GPU 1: row-warp proofs 67, half
#                                      # the GPU tests 344
#   bash bench/gpu_lanes.sh 555 "rungs13d" "tests1of2"            # 336 s: diagnosis at 0 and 32768 (43), the pair
#                                      # (133: 1.056x), beside the other half of the GPU tests (320)
# Session 14 (nvidia-h200-x2, then one H200), the same export, fresh then warm:
#   bash bench/gpu_lanes.sh 560 "probe_ncu probe_gemv rungs14d" "proofs14d proofs13 tests2of2"   # 538 s: the probe
#                                      # refused its own weights ('cuda:0' against 'cuda'); the step rebuilt (280 s),
#                                      # its one arm (403.8 / 388.6), both tensor-core diagnoses and swaps; GPU 1: the
#                                      # proofs (~60 s each), half the GPU tests (341)
#   bash bench/gpu_lanes.sh 560 "rungs14d" "rungs9 rungs13 tests1of2"   # 538 s: cupy_mma (tile) 0.985, the experts
#                                      # on it 0.975, cupy_floatrow 0.996; GPU 1: the prefill rebuilt (95 s), the
#                                      # bf16-scratch KDA pair (1.029x, 41.8k tok/s), the other half of the GPU tests
#   then on one H200: SUITE_BUDGET=250 bash bench/gpu_suite.sh install probe_ncu   # Nsight Compute, 27 s warm
#   then, fresh on two H200s: bash bench/gpu_lanes.sh 465 "rungs14e" "proofs14e probe_ncu"   # 368 s: the pipe forms'
#                                      # proofs passed and lost per op (linear 652 against the tile's 578 and row-warp's
#                                      # 507 us a token; experts 41.5 against 37.1 and triton_prefetch's 34.9 us a
#                                      # layer); the step rebuilt (248 s), both diagnosed and swapped, neither pair fit
#                                      # (140 s left, ~150 needed). Stage rungs14e was then removed: both would lose
# Session 15 (bench/gpu-runs/2026-11-30-session15/README.md), 4 calls, 1689 s, the same export:
#   bash bench/gpu_lanes.sh 560 "rungs15d" "proofs13d probe_ncu probe_mma tests2of2"   # 486 s fresh: the step rebuilt
#                                      # (~220 s), the staged linear 0.969 (its pair 115 s), the experts' pair SKIPPED
#                                      # (106 s left); GPU 1: the proofs, ncu with stall reasons, the pipe warps, tests
#   bash bench/gpu_lanes.sh 480 "rungs15d" "tests1of2"   # 332 s warm: the staged experts 0.987; the other tests
#   bash bench/gpu_lanes.sh 560 "rungs15r" "proofs15r"   # 280 s fresh: the router's proof failed (a test bug and the
#                                      # first form slower per op), its rung left out; the step rebuilt anyway
#   on one H200: bash bench/gpu_lanes.sh 560 "rungs15r" ""   # 472 s fresh: the second form's proof (18 s), diagnosis
#                                      # (56 s), swap, pair (141 s): 0.997
# Session 16 (bench/gpu-runs/2026-11-30-session16/README.md), 3 calls on two H200s, 1681 s, the same export:
#   bash bench/gpu_lanes.sh 560 "rungs16d" "proofs16d probe_ncu tests1of2"   # 561 s fresh: the step rebuilt (~300 s),
#                                      # the half linear 0.943 (its pair 133 s); GPU 1: the proof (124 s; the half form
#                                      # 18.6 against 12.3 us per op), ncu, shard 1 stopped at the budget
#   bash bench/gpu_lanes.sh 480 "rungs16d" "probe_router tests2of2"   # 482 s warm: the half experts 0.939 (200 s);
#                                      # the routers under ncu (21 s); shard 2 stopped at the budget (79 of 87)
#   bash bench/gpu_lanes.sh 550 "proofs16d tests1of2" "tests2of2"   # 551 s fresh: the mended half form 13.0 against
#                                      # 12.2 us; shard 1 passed (838, 415 s); shard 2 stopped at 84 of 87 (both ~1.35x
#                                      # slower side by side: the lanes now split the host's cores)
# Session 17 (bench/gpu-runs/2026-11-30-session17/README.md), the same export; 5 calls, 1589 s of device time:
#   bash bench/gpu_lanes.sh 560 "rungs17d" "probe_pdl probe_copy2 probe_ncu_source tests1of2"   # 507 s fresh: the
#                                      # step rebuilt (212 s), copy2 0.995 (none); GPU 1: the proofs, the PDL probe
#                                      # (PDL lost: x read from L2), ncu's source page, shard 1 (752 passed, 309 s)
#   bash bench/gpu_lanes.sh 470 "rungs17d" "tests2of2"   # 420 s warm: norm-PDL 0.798, PDL experts 0.683 (both
#                                      # forecast as regressions); shard 2 passed (229, 400 s)
#   NCU_SOURCE_KERNEL=rowcp2x bash bench/gpu_lanes.sh 480 "rungs17e" "probe_copy2x probe_ncu_source"   # 416 s
#                                      # fresh: copy2x 0.995 (none)
#   bash bench/gpu_lanes.sh 150 "probe_xcast" ""          # one H200, 20 s: no L2 contention on a shared x
#   bash bench/gpu_lanes.sh 240 "probe_pdl" ""            # one H200, 75 s: x through L1, PDL saves 0.6-0.8 us a pair
# Session 18 (bench/gpu-runs/2026-12-01-session18/README.md), the same export; 6 calls, ~1610 s of device time:
#   bash bench/gpu_lanes.sh 560 "rungs18d" "probe_pdl probe_pdl_floor tests1of2"   # 453 s fresh on two H200s: the
#                                      # step rebuilt, the PDL experts 1.000 (none); the norm-PDL rung left out (no
#                                      # row-warp record: mended since, proof_rowwarp_side); PDL floor 0.3 us a launch
#   bash bench/gpu_lanes.sh 560 "probe_copy2 rungs18d" "tests2of2"   # 428 s warm: norm-PDL 1.007, both 1.008 (none)
#   bash bench/gpu_lanes.sh 540 "rungs18e" ""             # one H200, 426 s fresh: the active attention 1.005 / 0.991
#   bash bench/gpu_lanes.sh 200 "probe_attn_active" ""    # one H200, 36 s, twice: the active form mended (ties at
#                                      # full depth), the 16-byte absorb lost twice (reverted)
#   bash bench/gpu_lanes.sh 150 "probe_persist" ""        # one H200, 19 s: one persistent launch 7.44 against 6.91
#                                      # us a GEMV as launches
# Session 19 (bench/gpu-runs/2026-12-01-session19/README.md), one H200, the same export; 6 calls, 1775 s:
#   bash bench/gpu_lanes.sh 560 "probe_persist proofs19 rungs19" ""   # 248 s fresh: the trace (barrier wait 2.8 us a
#                                      # layer); the side-stream proof 7 of 8 (the step did not fork), rung left out
#   bash bench/gpu_lanes.sh 560 "proofs19 rungs19 rungs18e" ""   # 211 s warm: the mended active attention 1.007 /
#                                      # 1.001 (none)
#   bash bench/gpu_lanes.sh 560 "proofs19 rungs19" ""        # 424 s fresh: the step rebuilt, the proof 8 of 8, the
#                                      # captured gate of k3-nano q4_k_m, side_stream 1.007 / 1.008 (none)
#   bash bench/gpu_lanes.sh 420 "tests1of2" ""               # 393 s warm: 275 passed in 373 s
#   bash bench/gpu_lanes.sh 345 "tests2of2" ""               # 346 s warm: stopped at the budget (~756 of ~770)
# Session 21 (bench/gpu-runs/2026-12-01-session21/README.md), one H200, the same export; 7 calls, ~1660 s:
#   bash bench/gpu_lanes.sh 560 "probe_timeline rungs20" ""  # 425 s fresh: the step rebuilt (264 s), the probe left
#                                      # out (268 s left, it needs ~300); the side-priority captured gate refused by a
#                                      # bug (kda_norm, not called by that step, listed as a round trip); the PDL
#                                      # router's graph test caught a race (x read before the wait)
#   bash bench/gpu_lanes.sh 480 "tests2of2" ""                # 473 s warm: 770 passed
#   bash bench/gpu_lanes.sh 470 "tests1of2" ""                # 450 s warm: 289 passed, 4 failed (the race, the PDL
#                                      # router's speed claim, kda_norm's decode_args x2); all four mended, then run
#                                      # by hand on a fresh machine (calls 4-7): every one passed, the PDL pair 1.042x
# Session 22 (bench/gpu-runs/2026-12-01-session22/README.md), one H200, the same export; 6 calls, ~1656 s:
#   bash bench/gpu_lanes.sh 560 "rungs20 rungs21 rungs22" ""  # 538 s fresh: the step rebuilt; side_priority 1.001 /
#                                      # 1.000 (none); the PDL router's proof then out of budget
#   bash bench/gpu_lanes.sh 560 "rungs20 rungs21 rungs22" ""  # 492 s warm: the PDL router 1.011 / 1.013, the fused
#                                      # KDA norm (triton_split) 1.006 / 1.007 (both none); swiglu's proof and swap
#   bash bench/gpu_lanes.sh 530 "rungs21 rungs22" ""          # 302 s warm: swiglu 1.002 / 1.004, the deep attention
#                                      # 1.009 / 1.011 (both none)
#   (calls 4-6 by hand, now stage rungs22all) the four together over the row-warp step: 1.035 / 1.034, again 1.038 /
#                                      # 1.034 (win; frontier 417.2 / 400.5), then the new step diagnosed
# Session 23 (bench/gpu-runs/2026-12-02-session23/README.md), one H200, the same export; 7 calls, ~1613 s (three
# machine starts; ~240 s before call 5 went to start-up, transfer and the idle tail of the machine before):
#   four short calls first: kda_lowrank_norm's GPU tests and its launch-shape probe (bench/probes/kda_lowrank_forms.py)
#   SUITE_SKIP="gate-captured-s23-pdl gate-captured-s23-lowrank gate-captured-s23-side" \
#     bash bench/gpu_lanes.sh 555 "rungs23 rungs24" ""       # 541 s fresh: the step (~290 s), the four proofs (the
#                                      # fused gates' failed one bound, mended since), the diagnosis, the PDL swaps
#   SUITE_SKIP=... bash bench/gpu_lanes.sh 480 "rungs23" ""  # 447 s warm: the captured gate, then decode-s23-nones
#                                      # 1.095 / 1.093 (win; forecast 1.043 / 1.041): the frontier 458.3 / 438.3 (the
#                                      # pair with its three 48B gates and two 32768 fills took 386 s)
#   then the fused gates' GPU tests by hand (22 s): 10 passed
# Session 24 (bench/gpu-runs/2026-12-02-session24/README.md), one H200, the same export (decode-s23-nones left out);
# 7 calls, ~1603 s, one machine start:
#   SUITE_SKIP="gate-captured-s23-pdl gate-captured-s23-lowrank gate-captured-s23-side gpu-tests-attn-deep \
#     gate-captured-s23-attn-deep-active" bash bench/gpu_lanes.sh 560 "rungs23 rungs24" ""   # 545 s fresh: the step
#                                      # (317 s), the proofs (side 32, kda_norm 28, kda_lowrank 26 s), session 22's
#                                      # step diagnosed (67), the PDL swaps (24); no captured gate fitted
#   SUITE_SKIP=... bash bench/gpu_lanes.sh 565 "rungs23 rungs24" ""   # 499 s warm: decode-s23-nones 1.095 / 1.092
#                                      # again (364 s: its gate B 233 s, ~190 of them eight silent bit-identity
#                                      # reruns, now one joint rerun), session 23's step diagnosed, the fused gates'
#                                      # swap and captured gate
#   SUITE_SKIP=... bash bench/gpu_lanes.sh 585 "rungs24 probe_timeline23" ""   # 315 s warm: decode-s24-gates 0.980 /
#                                      # 0.982 (none; forecast 1.003); the probe failed in 12 s (a Registry for a path)
#   then the probe mended, by hand, ~20 s a registry set (calls 4-7)
# Session 25 (bench/gpu-runs/2026-12-02-session25/README.md), one H200, the export below; 7 calls, ~1791 s, two starts:
#   bash bench/gpu_lanes.sh 560 "rungs25 probe_timeline24" ""   # 546 s fresh: the step (~330 s), gpu-tests-f16-pdl
#                                      # 8 passed (82 s), gpu-tests-conv-pdl failed to compile at W=3 (mended in
#                                      # 8cf1b95), the F16 PDL swap and its captured gate (32 s: one joint rerun)
#   SUITE_SKIP="gpu-tests-conv-pdl gpu-tests-kda-lowrank" bash bench/gpu_lanes.sh 560 "rungs25 probe_timeline24" ""
#                                      # 306 s warm: the diagnosis (63), decode-s25-f16pdl 0.998 / 0.999 (none; a pair
#                                      # 196 s: gate A 89, gate B 56), the timeline (23)
#   bash bench/gpu_lanes.sh 560 "frontier131k" ""   # 311 s warm: 387.8 tok/s Q4_K at 131072 (win over 331.0), IQ1_S
#                                      # 6.497 (regression: the Q4_K expert kernels passed IQ1_S to the float32 path)
#   then by hand: the IQ1_S diagnosis (92 s); on a fresh machine the fix, moe_experts@IQ1_S=triton_prefetch: 309.1
#   (its ledger lost under $OUT) and 308.6 (win over 296.6); short_conv=triton_pdl's GPU tests passed (2.40x slower)
# Session 26 (bench/gpu-runs/2026-12-02-session26/README.md), one H200, the export of session 25 (decode-s22-all
# decode-s23-nones included); 4 calls, ~1673 s, two starts:
#   SUITE_SKIP="gpu-tests-f16-pdl" bash bench/gpu_lanes.sh 560 "rungs26 rungs25" ""   # 498 s fresh: the step by
#                                      # swaps (194 s with the kernel caches), decode-s26-exp-shared 0.996 / 0.996
#                                      # (none; per op 0.974); rungs25's proofs did not fit
#   SUITE_SKIP="gpu-tests-f16-pdl gpu-tests-conv-pdl" bash bench/gpu_lanes.sh 560 "rungs25 probe_timeline24" ""
#                                      # 207 s warm: decode-s25-gates-pdl 0.969 / 0.971 (regression), the timeline
#   bash bench/gpu_lanes.sh 560 "rungs26w probe_ncu_moe" ""   # 405 s fresh: call 2's registries restored and mended
#                                      # (two proofs, 20 s: the step ready at 62 s), decode-s26-exp-wide 0.966 / 0.968
#                                      # (regression; per op 0.944), Nsight Compute on the experts (25 s)
#   SUITE_SKIP="gpu-tests-f16-pdl gpu-tests-attn-deep gate-captured-s23-attn-deep-active" \
#     bash bench/gpu_lanes.sh 500 "rungs23" ""   # 428 s warm: decode-s23-pdl 1.020 / 1.019, decode-s23-lowrank 1.013 /
#                                      # 1.011 (both none); decode-s23-side did not fit
# Session 27 (bench/gpu-runs/2026-12-02-session27/README.md), one H200, the export of session 25 (decode-s22-all
# decode-s23-nones included); 5 calls, ~1706 s, two starts:
#   bash bench/gpu_lanes.sh 560 "rungs27 probe_ncu_moe" ""   # 478 s fresh: registries mended (86 s), decode-s27-exp-split
#                                      # 0.937 / 0.939 (regression; per op 0.871); the probe did not fit
#   bash bench/gpu_lanes.sh 560 "rungs27q probe_ncu_moe" ""  # 262 s warm, with decode-s27-exp-split wrongly added to
#                                      # SUITE_TIMED (winners only): the Q8 split pair over the losing split step
#                                      # 1.042 / 1.043; Nsight Compute on the experts (29 s)
#   SUITE_SKIP="gpu-tests-exp-q8" bash bench/gpu_lanes.sh 560 "rungs27q" ""   # 177 s warm: decode-s27-exp-q8 1.008 /
#                                      # 1.007 (none)
#   SUITE_SKIP="gpu-tests-f16-pdl gpu-tests-attn-deep gate-captured-s23-attn-deep-active gate-captured-s23-pdl \
#     decode-s23-pdl gate-captured-s23-lowrank decode-s23-lowrank" bash bench/gpu_lanes.sh 480 "rungs23" ""
#                                      # 237 s warm: decode-s23-side 1.012 / 1.011 (none)
#   bash bench/gpu_lanes.sh 455 "rungs28 probe_ncu_moe" ""   # 417 s fresh: registries mended (58 s), decode-s28-exp-q8h
#                                      # 1.157 / 1.151 (win: 526.6 / 501.0 tok/s); the probe did not fit
# Session 28 (bench/gpu-runs/2026-12-02-session28/README.md), one H200, the export of session 25 plus
# decode-s28-exp-q8h; 5 calls, ~1685 s, three starts:
#   bash bench/gpu_lanes.sh 560 "rungs29 probe_ncu_moe" ""   # 524 s fresh: registries mended on the new one-token
#                                      # cases (16 proofs, ready at 176 s), decode-s29-linear-q8 1.005 / 1.008 (none;
#                                      # per op x1.158); the probe did not fit
#   bash bench/gpu_lanes.sh 470 "frontier131k probe_ncu_moe" ""   # 278 s warm: 440.8 tok/s Q4_K at 131072 (win over
#                                      # 387.8), IQ1_S 308.5 (none), Nsight Compute on the experts (33 s)
#   bash bench/gpu_lanes.sh 585 "rungs30 probe_ncu_moe" ""   # 519 s fresh: the six cupy experts selections re-proven
#                                      # (ready at 111 s), decode-s30-exp-q8p 0.958 / 0.961 (regression; per op 862
#                                      # against 788 us); the probe did not fit
#   bash bench/gpu_lanes.sh 200 "probe_ncu_moe" ""   # 53 s warm: Nsight Compute with the pipelined pair
#   then, fresh on the last 272 s, by hand: bash bench/gpu_suite.sh install, and with the hand-run exports
#   SPARKOPS_PEROP_DIR=$OUT python3 -m pytest -q -rP -m gpu -k q8_pairs tests/backends/test_cupy_pdl.py \
#     tests/backends/test_cupy_timing.py   # 39 s: the pairs form's 10 tests passed; per op 851 against 794 us
# Session 29 (bench/gpu-runs/2026-12-02-session29/README.md), one H200, session 28's export; 5 calls, ~1490 s, three
# starts:
#   bash bench/gpu_lanes.sh 300 "proofs31 probe_ncu_moe" ""   # 179 s fresh: the pairs form's tests passed; per op the
#                                      # padded x 751 against the Q8 hidden pair's 794 us (dense 850); Nsight Compute:
#                                      # gate/up 14.08 against 16.93 / 15.62 us, short-scoreboard 6.24 -> 1.13 an issue
#   bash bench/gpu_lanes.sh 565 "rungs31" ""   # 412 s fresh, PAIRS_X = "padded": decode-s31-exp-q8w 1.014 / 1.014
#                                      # (none; forecast 1.015)
#   bash bench/gpu_lanes.sh 570 "rungs32" ""   # 168 s fresh: registries mended on the new Q6_K one-token case (75 s);
#                                      # 10 of 13 x16 tests failed in the test's helper (cuda against cuda:0)
#   bash bench/gpu_lanes.sh 560 "rungs32" ""   # 316 s warm: 13 passed; per op 94.8 against cupy_float's 144.0 us;
#                                      # decode-s32-lmhead-x16 1.029 / 1.028 (win: 546.0 / 518.5 tok/s)
#   (SUITE_TIMED + decode-s32-lmhead-x16) bash bench/gpu_lanes.sh 315 "frontier131k" ""   # 140 s warm: 453.6 tok/s
#                                      # at 131072 (win over 440.8); the IQ1_S half skipped by the deadline
# Session 30 (bench/gpu-runs/2026-12-02-session30/README.md), one H200, session 29's export; 7 calls, ~1675 s, three
# starts:
#   bash bench/gpu_lanes.sh 560 "rungs33 probe_ncu_moe" ""   # 575 s fresh: registries mended (169 s: moe_rowwarp.cu,
#                                      # moe_experts.py and linear.py had changed); gpu-tests-exp-q8c 24 passed; per
#                                      # op the copy down 933 (1 group 807) against the warp down's pair's 787 us:
#                                      # forecast 0.844; decode-s33-exp-q8c stopped by the budget; the probe skipped
#   bash bench/gpu_lanes.sh 480 "rungs34 probe_ncu_moe" ""   # 325 s warm: decode-s34-stack 1.021 / 1.021 (win:
#                                      # 556.2 / 527.1 tok/s; forecast 1.056 / 1.053); Nsight Compute: the copy
#                                      # downs alone 14.9-17.5 against 11.7-12.5 us
#   (SUITE_TIMED + decode-s34-stack) bash bench/gpu_lanes.sh 440 "frontier131k" ""   # 253 s warm: 459.4 tok/s Q4_K
#                                      # at 131072 (none over 453.6; frontier raised), IQ1_S 315.0 (win over 308.6)
#   SUITE_REDO=1 bash bench/gpu_lanes.sh 400 "rungs34" ""   # 102 s warm, the same pair again: 1.019 / 1.018 (none:
#                                      # every pair faster, under the 2% band)
#   PYTHONPATH=/tmp/site python3 bench/probes/step_timeline.py --model /tmp/k48-q4_k_m.gguf \
#     --registry /tmp/cuda-s32-lmhead-x16.toml --registry /tmp/cuda-s34-stack.toml --fill-registry /tmp/cuda-bf16.toml \
#     --depth 0 --replays 5 --out $OUT/probe-timeline34.json   # 48 s warm: span 1861.0 -> 1822.8 us a replay
#   (fresh, carrying .whl only) bash bench/gpu_lanes.sh 230 "probe_ncu_source_moe" ""   # ~85 s: the Q8 down's
#                                      # stall samples 22% on its id loads, 16% on its hidden loads; the pairs
#                                      # gate/up's 22% on x's first use, 16% on its barrier
#   (fresh, carrying .whl only) bash bench/gpu_lanes.sh 185 "proofs35 probe_ncu_source_moe" ""   # ~76 s: the q8-loads
#                                      # down's 21 tests passed; per op "ids" 736.9, "ahead" 746.3 against the Q8
#                                      # hidden pair's 785.3 us (the pairs pair 712.2 against 750.4)
# Session 31 (bench/gpu-runs/2026-12-05-session31/README.md): no machine. Every start asked for (H200 and H100, 16
# refused starts of 60-90 s and 9 refusals of 15 s: ~1576 of the 1800 s) came back "no device machine could be
# started". Nothing was timed; the plan below is session 30's with this session's work added.
# Next session: the step is still rungs32's (cuda-s32-lmhead-x16.toml). The stack won once (1.021 / 1.021) and then
# timed none (1.019 / 1.018, every one of its 24 pairs faster), and SUITE_TIMED lists winners only (the suite refuses
# decode-s34-stack there: its newest rows did not win), so a third pair decides. A checkout's .kcache does not survive
# a session: a first call carrying none makes the step by swaps (~450 s); once a call has packed registries.tgz, copy
# it to bench/carry/ and commit it (bench/carry/README.md), and the suite restores it on the next fresh machine.
# reference.lock was re-pinned in session 31 (add_rmsnorm_router's reference), so every carried record is stale and
# --mend re-proves them all once.
#   export SUITE_TIMED="decode-lastblock decode-convmerge decode-moe-prefetch decode-router-prefetch
#     decode-attn-cupy-now decode-lmhead-cupy-float decode-linear-rowwarp prefill-dqmm prefill-kda-chunked
#     prefill-chunk16k prefill-moe-fused prefill-kda-split-32k prefill-sdpa-32k prefill-both-32k prefill-kda-tf32-32k
#     decode-s22-all decode-s23-nones decode-s28-exp-q8h decode-s32-lmhead-x16" SUITE_PREFILL_BASE=bf16   # (one line)
#   bash bench/gpu_lanes.sh 570 "probe_router_anatomy probe_ncu_source_router proofs36 rungs34" ""   # fresh: the
#                                      # router by stages (~40 s), its SASS page (~15 s), the fused norm-and-router's
#                                      # GPU tests and its side-by-side record (never run yet), then the step by swaps
#                                      # and the stack's third pair (what the budget leaves; the next call finishes it)
#   bash bench/gpu_lanes.sh 560 "rungs34 rungs35 rungs36" ""   # warm: the stack's pair if not done; the down's ids
#                                      # read once a warp (x1.066 per op in session 30); [engine] fuse_router_norm
#                                      # (forecast from proofs36's record) - each over the step now
#   then probe_timeline_now, and frontier131k under the step now, if it moved
#   then the leads below, as built (a rung a call; chain a warm call after each)
# Session 32 (bench/gpu-runs/2026-12-05-session32/README.md): no H200 came; one H100 ran five calls (~1500 s). Call 1
# ran the probes and proofs36, then made the step by swaps only through session 23's (the budget ended). Call 2's
# rungs34 then timed the stack over cuda-s23-nones.toml, the x16 step's registry missing: 1.168, retracted (now_reg
# refuses such a base now; now_chain makes it by its recipe, now_pairs). rungs35 1.014 (none); rungs36 0.864
# (regression: the fused norm-router is 19.7 us a layer in the step). Its registries.tgz is bench/carry's now.
# Next session: session 31's plan above, decode-s34-stack still out of SUITE_TIMED (its newest standing pairs are
# session 30's win and none): a fresh call restores the carried registries (--mend), now_chain makes the Q8 hidden and
# x16 registries (two swaps), then the stack's third pair over the x16 step:
#   bash bench/gpu_lanes.sh 570 "rungs34" ""   # fresh
# An H100's pairs are the same comparison on another memory system; say which card gave each row (the H100 frontier
# keys are its own). rungs36 is done (a regression): SUITE_SKIP="diagnose-decode-s36-norm-router swap-s36-norm-router
# decode-s36-norm-router" keeps it out of a call that names it. The sorted routing tail (moe_router=
# cupy_rowwarp_pdl_sorted, the same bits) passed its 49 GPU tests and timed x1.012-1.030 per op (calls 6-7): its rung,
# stage rungs37 / proofs37, is written but forecast ~x1.002 of the step, so it waits for a stack.
# The timeline's tails (python3 bench/probes/timeline_tails.py; the session-32 README's table): the KDA o_proj adds
# 8.6 us after the recurrence, the MLA o_proj of the same shape 6.3 from a cold start. linear@Q4_K=
# cupy_rowwarp_pdl_q8_shortplain launches the short Q8 GEMVs plainly (the same bits); stage rungs38 times it over a
# step that runs the Q8 GEMVs (the stack's: after rungs34 wins; else it says so and times nothing):
#   bash bench/gpu_lanes.sh 560 "rungs35 rungs38 probe_timeline_now" ""   # warm, after rungs34
# Session 30's H200 replays read the same way: the float warp form's KDA o_proj adds 5.26 us after the recurrence (PDL
# helps it), the Q8 pair form's 8.61; the Q8 tall GEMV adds 9.50 after add_rmsnorm against the float copy form's
# 11.33. linear@Q4_K=cupy_rowwarp_pdl_q8_tall takes each where it is ahead (Q8 tall, float short, all PDL); stage
# rungs39 times it over the step now, one change (~49 us a token, ~2.7% forecast on the tails). Run it first:
#   bash bench/gpu_lanes.sh 570 "rungs39 rungs34" ""   # fresh: the tall rung over the x16 step, then the stack's pair
# The larger leads from the same table, not built: the short conv and the KDA recurrence in one launch (4.8 + 5.6 us a
# KDA layer, ~80 us a token to gain), and the MoE layer's router, gate/up and down in one persistent launch (33.1 us a
# layer for 13 us of bytes at the read ceiling).
# The leads for new work (session 30's README; session 31 built the router's two, session 32 timed them: the
# routing tail is 2.76 of the router's 5.86 us, the fused norm lost): the Q8 down's first weights after its wait and its three dependent
# groups (what its source page leaves once the ids are read once, rungs35); the gate/up's x, staged by every block (a
# fifth of its stall samples on x's first use, a sixth on the barrier after); the router (150 us a token of own time, ~5.8 us a layer for 2.4 MB, on the critical path); the Q4_K GEMVs,
# whose own time in the step did not fall with Q8 activations (465 -> 472 us a replay) though they gained x1.15 in
# their own chain: what their side-by-side times is not what the step runs.
# The first of the larger leads is written: stage rungs40 (proofs40 its GPU tests alone) times [engine] fuse_conv_kda
# with short_conv_kda_norm=triton_split_pdl, the fused short conv and KDA recurrence and norm, over the step now,
# forecast from its side-by-side's record (perop-convkda-bfloat16.json) on short_conv and kda_norm together.
# Session 33 (bench/gpu-runs/2026-12-05-session33/README.md): no H200 came; two H100s. rungs39 won twice (1.025 /
# 1.025, 1.026 / 1.025): the step is cuda-s39-q8-tall.toml, and SUITE_TIMED gains decode-s39-q8-tall. rungs40 is a
# regression (0.943 / 0.946, per op x0.921): the short conv ran beside the side stream's f_b | g_b GEMV, which the
# recurrence waits for (bench/probes/timeline_tails.py's "side done" column, +0.03 us), so fusing it away saved
# nothing, and the kernel itself ran 11.1 us where the recurrence ran 6.3. Rebuilt (each tap a register vector):
# per op x1.68 / x1.61 and the chain's bits (call 9); rungs40 times it once more (its forecast, on the record, will
# overstate the step: the join caps it at ~1 us a layer). If it loses again, SUITE_SKIP="diagnose-decode-s40-conv-kda
# swap-s40-conv-kda decode-s40-conv-kda" keeps it out of a call.
# Next session, the export (session 32's plus the new step):
#   export SUITE_TIMED="decode-lastblock decode-convmerge decode-moe-prefetch decode-router-prefetch
#     decode-attn-cupy-now decode-lmhead-cupy-float decode-linear-rowwarp prefill-dqmm prefill-kda-chunked
#     prefill-chunk16k prefill-moe-fused prefill-kda-split-32k prefill-sdpa-32k prefill-both-32k prefill-kda-tf32-32k
#     decode-s22-all decode-s23-nones decode-s28-exp-q8h decode-s32-lmhead-x16 decode-s39-q8-tall"
#     SUITE_PREFILL_BASE=bf16   (one line)
# On an H200 first: the new step there (rungs39 has run on H100s only), its 131k row, then the stack's pair:
#   bash bench/gpu_lanes.sh 570 "rungs39 frontier131k" ""   # fresh
#   bash bench/gpu_lanes.sh 560 "rungs34 rungs40" ""         # warm: the stack over the x16 step, as before; the
#                                                              # rebuilt fused conv over the new step
# On an H100: frontier131k (the H100's 131k key is not open yet) and rungs34. The leads (the session-33 README): the
# MoE layer in one persistent launch (33 us a layer for 13 us of bytes); the recurrence's latency (6.3 us for 1.4 us
# of state); a KDA kernel doing conv, up-projections, recurrence and norm (it alone waits only for the first side
# GEMV: under 1% to gain).
# Session 34 (bench/gpu-runs/2026-12-05-session34/README.md): no machine came (two H200 requests and two H100 ones
# refused; the last said not to ask again this session). Built: bench/probes/critical_path.py (a replay of a step
# timeline's dependencies with what-ifs; on session 33's timelines it forecasts the fused conv's loss, x0.954 against
# the replays' 0.9485, where Amdahl said x1.04) and its ranking of the leads; [engine] shared_expert_side (stage
# rungs41: the shared expert as a dense SwiGLU FFN on the side stream, forecast moe_experts x1.125, x1.039 at most on
# the H100 timeline); probe_l2_hot (are the step's kernels faster with their weights in the L2?).
# Also built: [engine] gates_first (a KDA layer's gate-input GEMV first on the main line), timed with the fused conv
# as stage rungs42 (neither pays alone on the model; together x1.027); bench --forecast keeps a rung's critical-path
# forecast in its row (rungs41 and rungs42 pass one, from the committed session-33 timeline).
# Next session, the same export as session 33's plan below (SUITE_TIMED with decode-s39-q8-tall), then:
#   on an H200:  bash bench/gpu_lanes.sh 570 "rungs39 probe_l2_hot rungs41" ""   # fresh
#                bash bench/gpu_lanes.sh 560 "rungs42 frontier131k probe_timeline_now" ""   # warm
#   on an H100:  bash bench/gpu_lanes.sh 570 "probe_l2_hot rungs41" ""   # fresh
#                bash bench/gpu_lanes.sh 560 "rungs42 frontier131k probe_timeline_now" ""   # warm
# (rungs42 runs rungs40's proof too; rungs40 alone is forecast x1.00 by the model and can wait.) If rungs41 wins,
# SUITE_TIMED gains decode-s41-shared-side (now_pairs remakes it: "+ side_stream=on shared_expert_side=on"), and
# rungs42 is then made over it. Forecast any new lead with critical_path.py on the newest timeline before building it.
# Session 35 (bench/gpu-runs/2026-12-06-session35/README.md): no machine came again (H200 and H100 requests refused or
# not tried; ~700 s of the 1800 went to refusals). Built, both the step's own bits: add_rmsnorm=triton_pdl_wait (stage
# rungs43: the 54 residual-add norms launched as PDL dependents, the gain requested before the wait; x1.014-1.022 on
# the critical path) and attention=cupy_splitk_bf16_deep_pdl (stage rungs44: the MLA decode's four kernels with PDL,
# the absorb's and up projection's weights before their waits, the o_proj after them let start; x1.009-1.015). Each
# rung's --expect is its side-by-side's own time in a chain (perop_factor.py --minus). Stage rungs45 times the two in
# one pair (x1.023-1.037 together; each alone is about the noise band). One H200 came at the end: rungs41 lost,
# 0.990 / 0.990 (none; the shared expert's side kernels cost the main line more than they hid), and its A arm, the
# Q8-tall step, raised the H200 frontier to 560.3 / 530.2. Next session, the same export, then on whatever comes
# (a fresh call's install and synth take ~100 s, a rung ~300 s; a rung's base is the newest win older than it in
# NOW_RUNGS, so rungs42 is timed over the Q8-tall step whatever rungs45 does):
#   bash bench/gpu_lanes.sh 570 "rungs45" ""   # fresh: the PDL stack (both proofs, then the pair)
#   bash bench/gpu_lanes.sh 560 "rungs42 probe_l2_hot" ""   # warm: steps done already are skipped
# then frontier131k (the Q8-tall step's 131k row on an H200) and probe_timeline_now. A win joins SUITE_TIMED
# (decode-s45-pdl-stack: now_pairs holds its recipe); rungs43 and rungs44 time the two apart if the stack wins.
# Session 36 (bench/gpu-runs/2026-12-06-session36/README.md): built the two norm folds the critical-path model ranked
# next after the MoE-in-one-launch lead: moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm with [engine]
# fuse_moe_norm (stage rungs46: the step's Q8 hidden pair, the next block's residual add and norm in the down's last
# block) and linear_add_rmsnorm=cupy_rowwarp_pdl_norm with [engine] fuse_oproj_norm (stage rungs47: the o_proj's
# warp-form GEMV, the FFN norm in its last block); rungs48 times both in one pair. Each forecast takes the fold's tail
# from its proof's own record (perop_factor.py --gap), and a rung whose forecast is a loss is left out (forecast_gains).
# The lock was re-pinned twice (two new ops): a fresh machine's registry_keep --mend re-proves the carried records.
# One H100 came late (four calls, proofs only, SUITE_RCACHE_FILE an empty tarball to skip the mend): every GPU test of
# rungs45's and rungs48's proofs passed. Per op, the PDL norm x1.069 a pair and the PDL attention x1.023 a layer; the
# folds lost, their last block adding 15.9 us to the MoE down and 5.5 to the o_proj (~1 us expected), with the norm
# read in one round trip as with a loop. The arrival (576 acq_rel atomics on one address) is the suspect: the tree
# form (ARRIVAL = "tree", 32 group counters) was written after the device time ran out. Next session, session 33's
# export (above), then:
#   bash bench/gpu_lanes.sh 570 "proofs48 rungs45" ""   # fresh: the folds' records with both arrival forms, the stack
#   bash bench/gpu_lanes.sh 560 "rungs45 rungs48 rungs42" ""   # warm: rungs48 runs only if its forecast gains
# A win joins SUITE_TIMED (decode-s45-pdl-stack, decode-s48-norm-folds; now_pairs holds their recipes). Then
# frontier131k and probe_timeline_now on an H200.
# Session 37 (bench/gpu-runs/2026-12-06-session37/README.md): one H100 came at once (six calls, three fresh starts).
# rungs45 (add_rmsnorm=triton_pdl_wait with attention=cupy_splitk_bf16_deep_pdl, the step's bits) timed twice over the
# s39 step: x1.018 / x1.018, then x1.018 / x1.019 (a none: the tier needs 2%), raising the H100 frontier to 522.1 /
# 497.1 (critical path x1.007, Amdahl ~x1.07 on add_rmsnorm). The folds' tail (~15 us a layer in the MoE down, ~6 in
# the o_proj) survived three arrival forms (flat, tree, release: not the atomics on one address, not the L1
# invalidation of acq_rel) and two scratches (shared, global: not the shared-memory carveout). A lock change costs a
# fresh machine ~300 s of mending: bench/carry/registries.tgz is now call 4's, proven under this lock. The PDL stack
# cannot join SUITE_TIMED (timed_check.py takes wins only), so rungs49 (written after the calls) stacks it with the one
# gaining none the step lacks (`sparkops ledger nones`: moe_experts=cupy_rowwarp_pdl_q8_pairs, x1.014), as session
# 23's nones were stacked into a win. Next session, with session 33's export, on an H200:
#     bash bench/gpu_lanes.sh 570 "rungs49" ""   # fresh: three proofs, synth48, the diagnosis, swap and gate; the
#                                                # pair (~250 s) may need the same call again, warm (its B arm: the
#                                                # PDL stack's first H200 figure)
#     bash bench/gpu_lanes.sh 560 "frontier131k" ""   # warm, with decode-s49-nones in SUITE_TIMED if it won
#   and for the folds (written after the device time ran out): bash bench/gpu_lanes.sh 320 "proofs47 proofs46" ""
#   now times a timing-only relaxed arrival as a column (whether the GPU-scope release every block makes is the tail)
#   and writes kernels-oprojnorm/moenorm-bfloat16.json (SPARKOPS_PEROP_KERNELS: each column's replay kernel by kernel,
#   dur/own/gap: the fused kernel longer, or the one after it later).
# Session 38 (bench/gpu-runs/2026-12-06-session38/README.md): six calls, an H100 each time (every request named an
# H200). rungs49 WON over the s39 step: x1.035 / x1.033, then x1.038 / x1.037 (the step now: cuda-s49-nones.toml;
# decode-s49-nones joins SUITE_TIMED). frontier131k under it: 443.3 (Q4_K), 307.7 (IQ1_S). rungs50 (new: the pairs
# pair's ids-once down over it) x1.015 / x1.015, a none raising the H100 frontier to 542.1 / 516.2. The folds' tail
# was the last block's norm (probe_fold: the arrival +1.8 us in the MoE down, nothing in the o_proj; the scalar norm's
# loads waited one by one); the vector norm takes the folds to +4.0 / +1.1 us, still x0.893 / x0.864 per op against
# the PDL norm they replace: rungs46-48 stay unrun. The same disassembly showed the step's o_proj-sized warp GEMV and
# MoE down loading each round's activations only after the round before (four L2 round trips in turn after the
# wait): rungs51 (written after the calls, CPU-tested only) swaps in both "xpf" forms, which prefetch those lines into
# L1 right after the wait (the same bits). Next session, with the export below:
#     export SUITE_TIMED="<session 33's list> decode-s49-nones" SUITE_PREFILL_BASE=bf16
#     bash bench/gpu_lanes.sh 570 "rungs51" ""   # fresh (carry .kcache): gpu-tests-xpf (bits, replays, both records),
#                                                # the diagnosis, swap, captured gate and pair over the s49 step
#     bash bench/gpu_lanes.sh 560 "rungs50 frontier131k" ""   # on an H200 (none has timed the s49 step): rungs50's
#                                                # pair (its A arm the s49 step's first H200 figures), then 131072
#   bench/carry/registries.tgz is call 6's (the s49 and s50 steps among them); the rowwarp implementations' proofs are
#   mended on the first fresh machine (their sources changed after it). If rungs51 wins, add decode-s51-xpf to
#   SUITE_TIMED before frontier131k. proofs47 also runs the fold's new
#   misaligned-residual test (written after the calls).
# Session 39 (bench/gpu-runs/2026-12-06-session39/README.md): six calls, H200 for 1-3, H100 for 4-6. rungs51 (the xpf
# forms) LOST x0.740 / x0.749 on the H200 (per op x0.426 and x0.697). rungs50 x1.019 / x1.020 there, raising the H200
# frontier to 589.6 / 558.6; the s49 step at 131072: 475.4 (Q4_K), 316.3 (IQ1_S). On the H100, rungs52 (new: the
# o_proj-sized GEMV with x in registers, stacked with rungs50's down) WON x1.029 / x1.028 over s49, and the xr GEMV
# alone over s50 timed x1.015 / x1.014: the step now is cuda-s52-xr-ld.toml, decode-s52-xr-ld joins SUITE_TIMED
# (bench/timed_check.py now holds a rung to pairs over its base, so that attribution pair does not unseat it).
# Next session, on an H200 if one comes (the first fresh machine re-proves the rowwarp and MoE implementations, whose
# sources' docstrings changed after call 4's registries):
#     export SUITE_TIMED="<session 33's list> decode-s49-nones decode-s52-xr-ld" SUITE_PREFILL_BASE=bf16
#     bash bench/gpu_lanes.sh 560 "frontier131k" ""   # the s52 step at 131072 (Q4_K, IQ1_S)
#     bash bench/gpu_lanes.sh 560 "rungs52" ""   # the stack's pair again over s49 (now_reg takes the step below
#                                                # the rung): its first H200 figures, a second win or not
# Session 40 (bench/gpu-runs/2026-12-06-session40/README.md): six calls, all on an H100. The plan's rungs52 line timed
# nothing: a rung SUITE_TIMED names counts as timed and its pair is skipped; to re-time it, leave its name out of
# SUITE_TIMED for that call (call 6 did: s52 won again, x1.029 / x1.026). The s52 step at 131072: 458.0, IQ1_S
# 307.9 (H100). rungs53 (new: the ids-once down copying the hidden vector into shared memory after its wait) tied,
# x1.001 / x1.001 (per op x0.991): a none, the step stays s52. probe_timeline_now placed the s52 step's time (MoE
# layers 45%, the router at 12% of the read ceiling).
# Written after the calls: rungs54 (moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf, the ids-once down asking for its later
# groups' weights in the L2 before its wait, gate/up the shared expert's). Next session (the first fresh machine re-proves the MoE implementations,
# ~60 s):
#     export SUITE_TIMED="<session 33's list> decode-s49-nones decode-s52-xr-ld" SUITE_PREFILL_BASE=bf16
#     bash bench/gpu_lanes.sh 560 "rungs54" ""         # the l2pf down over s52 (its proofs, diagnosis, gate, pair)
#     bash bench/gpu_lanes.sh 560 "frontier131k" ""   # on an H200: the s52 step's first figures at 131072
#     SUITE_TIMED="<session 33's list> decode-s49-nones" bash bench/gpu_lanes.sh 560 "rungs52" ""   # on an H200
# Session 41 (bench/gpu-runs/2026-12-06-session41/README.md): three calls on one H100, then twelve requests found no
# machine. rungs54 (the l2pf experts) timed x1.012 / x1.011, then x1.011 / x1.013 (call 3: SUITE_REDO=1 with
# SUITE_SKIP="gpu-tests-exp-l2pf" re-times a pair on a warm machine): a none, the step stays s52; its B arm raised the
# H100 frontier to 554.9 / 528.0. Written after the calls: attention=cupy_splitk_bf16_deep_active_pdl and rungs55
# (the l2pf experts and the active PDL attention over s52). Next session (the first fresh machine re-proves the
# attention and router implementations, whose sources changed after call 3's registries; ~30-60 s):
#     export SUITE_TIMED="<session 33's list> decode-s49-nones decode-s52-xr-ld" SUITE_PREFILL_BASE=bf16
#     bash bench/gpu_lanes.sh 570 "rungs55" ""         # ~470 s fresh: both proofs, s52's diagnosis, gate, one pair
#     bash bench/gpu_lanes.sh 560 "frontier131k" ""   # on an H200: the s52 step's first figures at 131072
#     SUITE_TIMED="<session 33's list> decode-s49-nones" bash bench/gpu_lanes.sh 560 "rungs52" ""   # on an H200
#   If rungs55 wins, add decode-s55-stack to SUITE_TIMED before frontier131k. A proofs-only call skips the registry
#   restore with SUITE_RCACHE_FILE pointing at an empty tarball (tar -czf /tmp/e.tgz -T /dev/null).
#   With the machine warm after rungs55: bash bench/gpu_lanes.sh 120 "probe_router_anatomy" "" (~45 s), the
#   routing's 2.76 us split by what its warp does (the critical-path model on session 40's timeline: 2 us less a
#   router is x1.029 on the step, the largest lead it ranks). moe_router.cu's probe stages changed its source (the
#   registered build's SASS is unchanged), so the router implementations are re-proven by that mend too.
# Session 42 (bench/gpu-runs/2026-12-06-session42/README.md): four calls on H100s, no H200 came (six refusals).
# rungs55 won at d=0 (x1.030; x1.012 at 32768): the step is s55, decode-s55-stack joins SUITE_TIMED. The router's
# routing split: its picks 1.71 of 2.79 us. rungs56 (the merged picks, unrolled) x1.060 per op lost x0.889 in the step;
# probe_router_code placed it: with the L2 flushed before each pair, as the step leaves it, a one-warp tail pays for
# its instruction lines (merge unrolled +7.8 us, rolled +2.4, sorted +4.7, rt_route +0). Next session (the first fresh
# machine re-proves the router and attention implementations, whose sources changed after call 3's registries, ~60 s):
#     export SUITE_TIMED="<session 33's list> decode-s49-nones decode-s52-xr-ld decode-s55-stack" SUITE_PREFILL_BASE=bf16
#     bash bench/gpu_lanes.sh 575 "frontier_now frontier131k" ""   # on an H200: the s55 step's first H200 figures
#   (frontier_now: the step now at 0 and 32768 in one arm, each rung SUITE_TIMED names made by its swaps first).
#   The lead the probe opens: code and small data the step re-reads every layer (kernel code, activations, the KDA
#   state, the router's biases) are evicted by the weight streams; which streams carry an evict-first hint, and what
#   the others cost, is the next probe (a kernel's own time in the step against the same kernel with the L2 flushed
#   before it and warm, as router_code.py does for the routers).
# Session 43 (bench/gpu-runs/2026-12-06-session43/README.md): two H100 calls, then an H200. The s55 step's first H200
# figures (rungs57's A arm) raised the H200 frontier to 608.2 / 569.5, frontier131k 490.9 at 131072 (IQ1_S 317.4).
# probe_l2_hot: the step's kernels only 3-16% faster with their weights in the L2, a bulk prefetch ~0.3-0.4 TB/s:
# prefetching ahead is closed. probe_gateup: the gate/up's copies alone at the read ceiling, its staging and dots alone
# about as long, the whole nearly their sum. rungs57 (its copies in commit groups, all requested at once) lost x0.976.
# gateup_q8_q4_k's DEPTH (groups requested as earlier ones land) changed moe_rowwarp.cu after call 3's registries, so
# the next fresh machine re-proves the MoE implementations (~90 s). Next session:
#     export SUITE_TIMED="<session 33's list> decode-s49-nones decode-s52-xr-ld decode-s55-stack" SUITE_PREFILL_BASE=bf16
#     tar -czf /tmp/e.tgz -T /dev/null; export SUITE_RCACHE_FILE=/tmp/e.tgz SUITE_RCACHE_COMMITTED=/tmp/e.tgz
#     bash bench/gpu_lanes.sh 300 "probe_gateup proofs57" ""   # the pipelined forms (3x1 .. 9x3) and the grouped
#   form's GPU tests after the DEPTH refactor, no registry restored (~100 s). A pipelined form faster than the whole
#   per call is then registered (a GU_DEPTH beside GU_GROUPS) and timed as a rung over s55 (as rungs57).
# Session 44 (bench/gpu-runs/2026-12-06-session44/README.md): no machine came (every request refused), so session 43's
# plan stands unchanged: the two lines above, then a pipelined form faster than the whole per call registered and timed
# as a rung. The session's what-ifs on session 43's H200 timeline put 60% of the roofline past every rung-sized lead
# (all of them at their best: ~47%); the lead after the planned probe is a persistent decode step, not a rung.
# Rungs over s55 now forecast on the s55 replay of the call's own machine kind (S55_TIMELINE_H100 / _H200).
# Session 45 (bench/gpu-runs/2026-12-07-session45/README.md): no machine came (twelve requests refused). Built for the
# device: probe_persist's warp rings (each warp streams its own rows of every layer through 2-6 shared-memory slots,
# whatever the layer, x in registers, no block barrier; traced; and the chain again at 1152 rows a GEMV, where its
# dependencies and not its bytes set the pace). Next session, fresh: session 43's plan with probe_persist first (~60 s
# more GPU work; SUITE_TIMED as above for any rung after):
#     tar -czf /tmp/e.tgz -T /dev/null; export SUITE_RCACHE_FILE=/tmp/e.tgz SUITE_RCACHE_COMMITTED=/tmp/e.tgz
#     bash bench/gpu_lanes.sh 330 "probe_persist probe_gateup proofs57" ""
#   The 6-slot ring near its bytes at 2304 rows and at or under ~1.7 us a GEMV at 1152 makes a persistent decode step
#   the next implementation to build; no faster than session 18's form, and the trace names the phase that binds.
# Session 46 (bench/gpu-runs/2026-12-07-session46/README.md, H100): the warp rings ran: 5.57 us a GEMV at 1152 rows
# against 6.18 for launches (the wait for x_l, 2.6 us, binds; the slots do not matter); persistent_forecast.py puts
# 60% of the roofline at a stage latency of ~3.2 us or less, so this form is not the road to it. probe_gateup: 3
# groups with 1 requested ahead 12.22 against 13.27 us a call, registered as moe_experts=
# cupy_rowwarp_pdl_q8_pairs_l2pf_streamed (rungs58). Next session (SUITE_TIMED as above; ~450 s fresh):
#     bash bench/gpu_lanes.sh 500 "probe_persist_floor rungs58" ""
#   With less than ~650 s of device time: bash bench/gpu_lanes.sh 250 "probe_persist_floor proofs58" "" (the proof and
#   its per-op record, which forecast the rung).
# Session 47 (bench/gpu-runs/2026-12-07-session47/README.md, H100): rungs58 lost in the step (x0.993 / x0.994; per op
# x1.045): the step stays s55. probe_persist / probe_persist_floor gained bulk-copy rings, tagged-output rings (no
# counter: 1.82 us a stage at 8 rows) and the loaded chain (rowless warps streaming the weights: ~3.5 us a stage with 8
# writing SMs, 5-6.7 with all 132 writing, at any stream rate or place). Next session, on an H200 (its loaded latency
# is the frontier machine's; with persistent_direct_x_beside, the counter form under a stream from a second kernel,
# built after the last call and not yet run; ~40 s of GPU work):
#     tar -czf /tmp/e.tgz -T /dev/null; export SUITE_RCACHE_FILE=/tmp/e.tgz SUITE_RCACHE_COMMITTED=/tmp/e.tgz
#     bash bench/gpu_lanes.sh 150 "probe_persist probe_persist_floor" ""
# Session 48 (bench/gpu-runs/2026-12-07-session48/README.md, H100): the counter chain beside another kernel's stream
# keeps 3.2-3.4 us a stage at 264 rows; chain_paced (a fetching warp a block, x once a block) runs the step's mean
# stage (2304 rows, 10.6 MB) at 5.24 us, 67% of the read ceiling. Next session, ideally on an H200 (~40 s of GPU work;
# SUITE_REDO=1 when the machine is still held from an earlier call, or every step is "done earlier"):
#     tar -czf /tmp/e.tgz -T /dev/null; export SUITE_RCACHE_FILE=/tmp/e.tgz SUITE_RCACHE_COMMITTED=/tmp/e.tgz
#     bash bench/gpu_lanes.sh 150 "probe_persist probe_persist_floor" ""
# It now traces chain_paced (where 1152 rows' 4.13 us go against 264 rows' 2.75) and times persistent_paced_xs_p200
# beside stream_beside (the stage and a full stream together): both built after the last call, not yet run.
# Session 49 (bench/gpu-runs/2026-12-07-session49/README.md): no machine came (twelve requests, 1531 s of the budget
# spent on starts that failed; the last 269 s too few to start one). Built for it: probe_q4k (bench/probes/
# q4k_chain.py), the persistent chain on the 48B step's own Q4_K stages at their widths with Q8 activations, checked
# against the reference, traced per stage kind, and its latency fitted into the forecast (--q4k-latency). Next
# session, ideally on an H200 (~60 s of GPU work for probe_q4k, ~40 more for session 48's unrun forms):
#     tar -czf /tmp/e.tgz -T /dev/null; export SUITE_RCACHE_FILE=/tmp/e.tgz SUITE_RCACHE_COMMITTED=/tmp/e.tgz
#     bash bench/gpu_lanes.sh 200 "probe_q4k probe_persist" ""
#   With too little budget for the suite's install: the probe alone after `pip install --no-deps -e .` (the write-up
#   gives the command). If a paced form's stage stays within ~1 us of its bytes at the step's widths (the forecast's
#   lambda), the persistent step's first piece is a KDA layer's stages in q4k_paced's form.
# Session 50 (bench/gpu-runs/2026-12-07-session50/README.md): one H100 after nine failed requests. probe_q4k: the
# paced Q4_K chain 10.9 us a stage (launches 15.0, bytes 3.8), its dots binding; lambda 10.6-10.7 us, a persistent step
# of such stages 25-26% of the roofline: not built. probe_iq1s: the step's IQ1_S GEMVs (cupy_float) 2066 -> 592 us a
# token on the new cupy_rowwarp_pdl_q8_iq1s (x3.49 per op); its experts form x0.785. Written after the calls, not run:
# the experts' cupy_rowwarp_pdl_q8h_iq1s (the hidden vector in Q8 once, a down of a warp an output), which rungs_iq1s
# swaps to only where probe_iq1s has it above x1, and the GEMV's cupy_rowwarp_pdl_q8_iq1s_short (short weights two
# octets a row), which probe_iq1s times beside the measured one. Next, on a machine with the step's registries (bench/carry's; ~600 s
# fresh):
#     export SUITE_TIMED="<the Session 39 block's list> decode-s49-nones decode-s52-xr-ld decode-s55-stack" SUITE_PREFILL_BASE=bf16
#     bash bench/gpu_lanes.sh 570 "probe_iq1s rungs_iq1s" ""
# Session 51 (bench/gpu-runs/2026-12-07-session51/README.md, H100): the IQ1_S grid in shared memory (the nibble grid,
# the same bits); rungs_iq1s WON with linear@IQ1_S=cupy_rowwarp_pdl_q8_iq1s_sg_short at 131072 (x1.173 / x1.151; H100
# IQ1_S frontier 368.9). The IQ1_S GEMVs had run on triton_lastblock (the registry's default linear), not cupy_float:
# probe_iq1s's NOW is corrected. The staged experts (moe_experts=cupy_rowwarp_pdl_q8h_iq1s_staged_flat) x1.56 per op,
# gate-proven, not yet a rung; linear=cupy_rowwarp_pdl_q8_iq1s_sg_mixed x1.10 per op over the won GEMV form (its rung
# after the experts'). Written after the calls, not run: the t2 repacking (_iq1s_t2.py: IQ1_S two bits a weight, no
# grid read; linear=cupy_rowwarp_pdl_q8_iq1s_t2, moe_experts=cupy_rowwarp_pdl_q8h_iq1s_t2, their grid twins' bits), which
# probe_iq1s times and --best picks where fastest. Next, two calls (a fresh one reaches the won step's diagnosis in
# ~470 s):
#     export SUITE_TIMED="<the Session 39 block's list> decode-s49-nones decode-s52-xr-ld decode-s55-stack" SUITE_PREFILL_BASE=bf16
#     export SUITE_IQ1S_LINEAR=cupy_rowwarp_pdl_q8_iq1s_sg_short SUITE_SKIP="diagnose-iq1s-131k decode131k-iq1s-gemv"
#     bash bench/gpu_lanes.sh 570 "probe_iq1s rungs_iq1s" ""   # fresh: probe, swaps, the GEMV step's diagnosis
#     bash bench/gpu_lanes.sh 420 "rungs_iq1s" ""              # warm: the experts pair over the won GEMV step
#   On an H200, leave decode131k-iq1s-gemv out of SUITE_SKIP (the GEMV rung's first H200 figures). The first fresh
#   machine re-proves the won GEMV's record (its Python sources, linear_iq1s.py and _weights.py, changed after the run;
#   its kernel bytes did not).
# Session 52 (bench/gpu-runs/2026-12-07-session52/README.md): no machine came; session 51's plan stands, with a third
# rung in rungs_iq1s (the GEMVs again over the experts' step, --over the won form) and the t2 forms' GPU tests apart
# (gpu-tests-iq1s-t2: where they fail the probe and the rungs go on without the t2 forms). Three calls on one machine:
#     export SUITE_TIMED="<the Session 39 block's list> decode-s49-nones decode-s52-xr-ld decode-s55-stack" SUITE_PREFILL_BASE=bf16
#     export SUITE_IQ1S_LINEAR=cupy_rowwarp_pdl_q8_iq1s_sg_short SUITE_SKIP="diagnose-iq1s-131k decode131k-iq1s-gemv"
#     bash bench/gpu_lanes.sh 570 "probe_iq1s rungs_iq1s" ""   # fresh: probe, swaps, the GEMV step's diagnosis
#     bash bench/gpu_lanes.sh 420 "rungs_iq1s" ""              # warm: the experts pair (~190 s), the experts' step diagnosed
#     bash bench/gpu_lanes.sh 420 "rungs_iq1s probe_ncu_iq1s" ""   # warm: the GEMV pair over it (~190 s), Nsight Compute
#   With under ~740 s of budget no rung can finish; the cheap call instead (fresh, no registries, ~230 s):
#     tar -czf /tmp/e.tgz -T /dev/null; export SUITE_RCACHE_FILE=/tmp/e.tgz SUITE_RCACHE_COMMITTED=/tmp/e.tgz
#     bash bench/gpu_lanes.sh 330 "probe_iq1s probe_ncu_iq1s" ""
# Session 53 (bench/gpu-runs/2026-12-07-session53/README.md): after six failed requests and a pause, an H100 (asked
# as an H200) for four calls. moe_experts@IQ1_S=cupy_rowwarp_pdl_q8h_iq1s_t2 WON at 131072 over the sg_short step,
# x1.221 (363.3 -> 443.5 tok/s, row 20261207-212536-c6982b, timed by hand: no diagnosis of its base fitted). The fp8
# MLA cache (attention=cupy_splitk_fp8_deep_active_pdl) passed its GPU tests and is x1.02 per op at 131072: the split
# is latency-bound (50% of DRAM), so rungs_fp8 waits for a restructured split. Next, on a fresh machine (the carried
# registries hold the t2 experts step and the t2 GEMVs swapped over it):
#     export SUITE_TIMED="<the Session 39 block's list> decode-s49-nones decode-s52-xr-ld decode-s55-stack" SUITE_PREFILL_BASE=bf16
#     export SUITE_IQ1S_LINEAR=cupy_rowwarp_pdl_q8_iq1s_sg_short
#     export SUITE_SKIP="diagnose-iq1s-131k decode131k-iq1s-gemv diagnose-iq1s-gemv-131k decode131k-iq1s-experts"
#     bash bench/gpu_lanes.sh 570 "probe_iq1s rungs_iq1s" ""   # fresh: probe, restore, synth, the gemv2 base's diagnosis
#     bash bench/gpu_lanes.sh 420 "rungs_iq1s" ""              # warm: linear@IQ1_S=..._t2 over the t2 experts (~x1.1)
#   On an H200, the IQ1_S step now against the H200's frontier there (317.4, session 43's step): decode131k-iq1s-now
#   under the t2 registry, one arm. rungs_fp8 stays out of the plan until the split is restructured (its record:
#   `pytest -m gpu tests/backends/test_cupy_attention_fp8.py -k side_by_side`).
# Session 54 (bench/gpu-runs/2026-12-07-session54/README.md): two calls on an H100 between ten failed or refused requests.
# linear@IQ1_S=cupy_rowwarp_pdl_q8_iq1s_t2 WON at 131072 over the t2 experts step, x1.029 (442.5 -> 455.2 tok/s, row
# 20261207-222717-010735). The twin split (attention=cupy_splitk_bf16_twin_active_pdl) passed its GPU tests and ties
# per op (74.94 against 73.97 us at 131072), so rungs_twin would find no gain in its record. Next, any machine:
#     SUITE_SKIP="probe-ncu-mla_split_mma_pdl probe-ncu-mla_split_twin_pdl" \
#         bash bench/gpu_lanes.sh 240 "proofs_twin proofs_bulk probe_split" ""   # ~60 s warm: the fixed twin test, the
#                                      # bulk split's first run and record, the splits' parts (probe_split)
#   then, if the bulk split is faster per op: SUITE_BULK_IQ1S_BASE=/tmp/cuda-s55-stack-iq1s-q8_iq1s_sg_short-q8h_iq1s_t2-\
#   q8_iq1s_t2.toml (one path) bash bench/gpu_lanes.sh 570 "rungs_bulk" ""   # both pairs at 131072 (two calls)
#   and on an H200 the IQ1_S step now single-arm at 131072 (the H200's IQ1_S frontier is session 43's 317.4):
#     SUITE_IQ1S_REG=/tmp/cuda-s55-stack-iq1s-q8_iq1s_sg_short-q8h_iq1s_t2-q8_iq1s_t2.toml \
#         bash bench/gpu_lanes.sh 480 "iq1s131k" ""   # fresh: restore, both 48Bs, the gates, one arm (~300 s)
# Session 55 (bench/gpu-runs/2026-12-08-session55/README.md): one call on an H100; no rung. probe_split: the one-group
# MLA split's loads alone take 59.0 of its 64.6 us at 131072 (one 64-row tile in flight an SM): its bytes in flight
# bind it, so the twin and the qreg split (attention=cupy_splitk_bf16_qreg_active_pdl) tie. Next, any machine:
#     SUITE_SKIP="probe-ncu-mla_split_mma_pdl probe-ncu-mla_split_bulk_pdl" \
#     SUITE_SPLIT_KERNELS="mla_split_l2pf mla_split_ring mla_split_qreg" bash bench/gpu_lanes.sh 400 \
#         "proofs_fp8_qreg proofs_l2pf proofs_ring proofs_bulk probe_split" ""   # ~7 min fresh: the fp8 qreg split
#                                      # (two fp8 tiles in flight), the L2-prefetching split (a second tile's bytes
#                                      # on their way to the L2) and the ring split (1.5 bf16 tiles in flight):
#                                      # first runs and records; the bulk tests after the alignment fix; the new
#                                      # splits taken apart
#   then, if a split is x1.05 per op or more: SUITE_SPLIT_IQ1S_BASE=/tmp/cuda-s55-stack-iq1s-q8_iq1s_sg_short-\
#   q8h_iq1s_t2-q8_iq1s_t2.toml (one path) bash bench/gpu_lanes.sh 570 "rungs_split" ""   # both pairs (two calls)
#   and on an H200 the IQ1_S step single-arm at 131072 (session 54's plan: SUITE_IQ1S_REG=... "iq1s131k").
# A rung the probes refuted is left out whole with SUITE_SKIP naming its three steps, e.g. for copy2:
#   SUITE_SKIP="diagnose-decode-linear-rowwarp-copy2 swap-linear-rowwarp-copy2 decode-linear-rowwarp-copy2"
# On two GPUs: bash bench/gpu_lanes.sh 560 "GPU0 STAGES" "GPU1 STAGES" ["parallel"] with the same stages split
# ("parallel" needs both GPUs and runs first in its call). SUITE_SKIP="NAME ..." leaves single steps out.
#
# Budget: the script stops starting work at SUITE_BUDGET seconds (default 560) after it began, and gives
# each command only the time left, so a call of 600 s always returns its results. Everything a call
# produced comes back in $OUT: suite.log, results-LANE.tgz per lane (logs, JSON, registries, PNGs) and
# bench.tgz (the machine's scoreboard: ledger.jsonl, frontier.toml, LADDER.md), and kernels.tgz (the compiled
# kernels, pack_kernels). Import the ledger here with `sparkops ledger import FILE` (unpack bench.tgz first).
#
# The device tool carries .whl (name it in `carry`); prepare it here with:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl gguf==0.19.0 tomlkit==0.15.2
set -uo pipefail
T0=$(date +%s)
BUDGET=${SUITE_BUDGET:-560}
# SUITE_PREFILL_BASE takes one value (choose_best): anything else is a typo that would silently run the 48B gate
case "${SUITE_PREFILL_BASE:-}" in ""|bf16) ;;
  *) echo "SUITE_PREFILL_BASE='$SUITE_PREFILL_BASE': the only value is bf16 (or leave it unset)" >&2; exit 2 ;;
esac
[ -n "${SUITE_DEADLINE:-}" ] && BUDGET=$(( SUITE_DEADLINE - T0 ))  # lanes share one end (bench/gpu_lanes.sh)
TMP=${SUITE_TMP:-/tmp}  # everything the suite keeps on the machine lives here (tests point it elsewhere)
OUT=${OUT:-$TMP/sparkops-out}
LANE=${SUITE_LANE:-main}
R=$TMP/suite-results/$T0-$LANE  # this call's logs (the machine's /tmp lives as long as it is held)
B=$TMP/suite-bench              # the machine's scoreboard, kept across calls
DJ=$TMP/suite-diag              # diagnoses (diagnose --json-out), the predictions later rows record
GPU_TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-240}  # seconds one GPU test may take (the slowest took ~46 s in sessions 13-15)
# --prediction FILE for a bench row, set only once that diagnosis exists (a missing file is refused by bench)
PRED_TORCH=""
PRED_BEST=""
mkdir -p "$OUT" "$R" "$B" "$DJ"
export PYTHONUNBUFFERED=1 SPARKOPS_CACHE=$TMP/sparkops-cache COLUMNS=160 PYTHONPATH=$TMP/site SPARKOPS_BENCH_DIR=$B
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The compiled kernels (Triton's and CuPy's caches) at fixed paths: Triton's cache groups name their files by absolute
# path, so a cache carried from another machine is found only at the same place. A fresh machine restores them from
# .kcache/kernels.tgz when the call carries it (install), and the call's last lane packs them into $OUT/kernels.tgz
# (pack_kernels): session 11 measured 95 s of cold Triton compiles in swap-bf16 alone, of a step build of ~320 s.
# Both caches key each entry by its source, options and compiler, so an entry whose kernel changed is never used.
KCACHE_TRITON=$TMP/sparkops-triton-cache KCACHE_CUPY=$TMP/sparkops-cupy-cache  # TMP: /tmp on every machine
KCACHE_FILE=${SUITE_KCACHE_FILE:-.kcache/kernels.tgz}  # what the call carried (tests point it elsewhere)
# The registries a session made (their check records are their proofs, pinned to sources, not to a machine): the last
# lane packs them into $OUT/registries.tgz; a fresh machine restores a carried .kcache/registries.tgz and keeps each
# one whose plan holds on cuda today (bench/registry_keep.py), so its swaps (~320 s of a first call) are not redone
RCACHE_FILE=${SUITE_RCACHE_FILE:-.kcache/registries.tgz}
# A checkout is new each session (its .kcache gone), so a session's registries are also committed (bench/carry/
# registries.tgz, copied from a call's $OUT): a call that carries none restores those, mended as above. Session 31
# lost ~450 s of its first call's budget to making the step by swaps without them
RCACHE_COMMITTED=${SUITE_RCACHE_COMMITTED:-bench/carry/registries.tgz}
[ ! -f "$RCACHE_FILE" ] && [ -f "$RCACHE_COMMITTED" ] && RCACHE_FILE=$RCACHE_COMMITTED
export TRITON_CACHE_DIR=$KCACHE_TRITON CUPY_CACHE_DIR=$KCACHE_CUPY
M=$TMP/k48-q4_k_m.gguf M1=$TMP/k48-iq1_s.gguf
TORCH_REG=$TMP/cuda-torch.toml FAST_REG=$TMP/cuda-fast.toml FILL_REG=$TMP/cuda-fill.toml BF16_REG=$TMP/cuda-bf16.toml
BEST_REG=$TMP/cuda-best.toml  # BF16_REG if it passes the 48B gate at 1,64,4096, else FAST_REG (stage_best)
CUPY_ATTN_REG=$TMP/cuda-fast-cupy-attn.toml  # FAST_REG with attention=cupy_splitk
FUSED_REG=$TMP/cuda-best-fused.toml  # BEST_REG with [engine] fuse_projections = true
FUSED_CUPY_ATTN_REG=$TMP/cuda-best-fused-cupy-attn.toml  # FUSED_REG with attention=cupy_splitk_bf16 (bf16 best only)
FUSED_CUPY_LINEAR_REG=$TMP/cuda-best-fused-cupy-linear.toml  # FUSED_REG with linear=cupy_dp4a (bf16 best only)
PREFILL_REG=$TMP/cuda-prefill.toml  # BF16_REG likewise, else FILL_REG (float32 with a fast prefill attention)
# session 6's rungs (stage rungs6): the split-K / MoE / router reductions done by the last program to arrive (one
# launch where there were two), then the KDA q/k/v short convolutions as one launch per layer
LB_PAIRS="linear=triton_lastblock moe_experts=triton_lastblock moe_router=triton_lastblock"
LB_REG=$TMP/cuda-best-fused-lastblock.toml  # FUSED_REG with LB_PAIRS
CONV_REG=$TMP/cuda-best-fused-lastblock-conv.toml  # LB_REG with [engine] fuse_short_conv = true
PDL_REG=$TMP/cuda-best-fused-lastblock-conv-pdl.toml  # CONV_REG with linear=triton_pdl (an experiment)
# session 7's rungs (stage rungs7): deeper weight streams ("triton_prefetch": FETCH_DEPTH chunks of loads in flight;
# the MoE's gate and up GEMVs in one loop), first in moe_experts, then in linear
MOEPF_REG=$TMP/cuda-best-fused-lastblock-conv-moepf.toml  # CONV_REG with moe_experts=triton_prefetch
LINPF_REG=$TMP/cuda-best-fused-lastblock-conv-moepf-linpf.toml  # MOEPF_REG with linear=triton_prefetch
ROUTPF_REG=$TMP/cuda-best-fused-lastblock-conv-moepf-routpf.toml  # MOEPF_REG with moe_router=triton_prefetch
WIDE_REG=$TMP/cuda-step-wide.toml  # the step now (when made) with attention=triton_splitk_wide
# the flat Q4_K GEMV form ("triton_flat": no layout change in the chunk loop), over the step now (now_reg) when made
FLATMOE_REG=$TMP/cuda-step-flatmoe.toml  # the step now with moe_experts=triton_flat
FLATLIN_REG=$TMP/cuda-step-flatmoe-flatlin.toml  # FLATMOE_REG with linear=triton_flat
# session 8's step (stage rungs8): the router prefetch registry with cupy's bf16 split-K attention (won at 0, 32768
# and 131072 in session 8), then linear=cupy_float over it (the Q6_K lm_head through cupy's weight stream with float
# activations)
ATTN_REG=$TMP/cuda-best-fused-lastblock-conv-moepf-routpf-cupy-attn.toml  # ROUTPF_REG with attention=cupy_splitk_bf16
CUHEAD_REG=$TMP/cuda-step8-q6k-cupy-float.toml  # ATTN_REG with linear@Q6_K=cupy_float (the lm_head's type alone)
CUFLOAT_REG=$TMP/cuda-step8-cupy-float.toml  # the step then with linear=cupy_float for every type
LOWRANK_REG=$TMP/cuda-step8-lowrank.toml  # the step then with [engine] fuse_low_rank = true
# session 9's prefill rung (stage rungs9): each GGUF weight decoded once to bf16, then cuBLAS / grouped GEMM
DQMM_REG=$TMP/cuda-prefill-dqmm.toml  # PREFILL_REG with linear=triton_dqmm moe_experts=triton_dqmm
KDAC_REG=$TMP/cuda-prefill-kdac.toml  # the prefill registry now (DQMM_REG if its rung won) with kda=triton_chunked
# the per-op speed-ups the rungs9 rows predict with (bench --expect, on their baseline's chunk diagnosis)
DQMM_EXPECT="--expect linear=9.5,moe_experts=6.3"
KDAC_EXPECT="--expect kda=3.4"
# session 10's prefill rung (stage rungs10): the MoE prefill's element-wise glue in two kernels, gate+up one GEMM
MOEFUSED_REG=$TMP/cuda-prefill-moefused.toml  # the prefill registry now with moe_experts=triton_dqmm_fused
# predicted on the 16384-token chunk diagnosis of its base (session 10: moe_experts 302 ms of 702): the grouped GEMMs
# (~85 ms) and the weight decode (~40) stay; of the ~177 ms of torch element-wise passes, index_put and the sum (~13 GB
# a layer), about 160 go (the two kernels read each slot tensor once: ~1 GB a layer) -> ~160 ms, x1.9
MOEFUSED_EXPECT="--expect moe_experts=1.9"
SDPA_REG=$TMP/cuda-prefill-sdpa.toml  # the prefill registry then (the fused MoE's if it won) with attention=triton_sdpa
# predicted on the 16384-token chunk diagnosis of its base: attention 115 ms of 702 (the flash kernel 109, ~170
# TFLOP/s); torch's fused attention took 21.2 ms a layer at T=32768 in session 1's probe against ~60 by the flash
# kernel's rate: x2.5 with the naive form's projection and copy kept
SDPA_EXPECT="--expect attention=2.5"
KSPLIT_REG=$TMP/cuda-prefill-kdasplit.toml  # the newest prefill winner with kda=triton_chunked_split
# its prediction: kda's time ratio measured by its GPU test at T=16384 (kdasplit_expect), else this estimate (the
# prepare kernel, 136 of kda's 174 ms, on 4x the programs at under half the registers: ~2x faster)
KSPLIT_EXPECT="--expect kda=1.6"
# session 11 (stage rungs11), at one forward of 32768 tokens after the tuned defaults: attention per layer 28.7 ms on
# the tuned flash kernel against 20.7 on cuDNN (the GPU tests' timings at T=32768), plus the naive form's projection
# and copies (~2 ms): x1.3 on attention; kda per layer 12.7 ms (one prepare kernel) against 10.9 (split), the tune
# studies at T=32768: x1.17
SDPA_FULL_EXPECT="--expect attention=1.3"
KSPLIT_FULL_EXPECT="--expect kda=1.17"
# session 12 (stage rungs12): both rungs of session 12's first call together (attention=triton_sdpa over the split
# KDA), then the split prepare's products on tf32 dots; its tune study at T=32768: 10.79 -> 9.17 ms a layer, x1.18
BOTH_REG=$TMP/cuda-prefill-both.toml
KTF32_REG=$TMP/cuda-prefill-kdatf32.toml
KTF32_FACTOR="kda=1.18"
# session 12's last study (stage rungs13): the tf32 split with bfloat16 W, Qg, Kg: 9.41 -> 8.06 ms a layer, x1.17
KBF16S_REG=$TMP/cuda-prefill-kdabf16s.toml
KBF16S_FACTOR="kda=1.17"
# session 13's decode rung (stage rungs13d): the Q4_K projections through cupy's row-warp GEMV (one warp per row, a
# row's loads all at once), a per-type selection over the decode step now. Its per-op figure (the side-by-side GPU
# test, bf16 activations, session 13): the Q4_K decode linears 954 -> 719 us a token in isolation (x0.754). In the
# step, linear is ~1.0 ms (session 9's diagnosis), of which the lm_head 0.14 and the F16 low-rank gates ~0.05 stay:
# ~0.8 ms of Q4_K -> ~0.6, so the op x1.25
RW_REG=$TMP/cuda-s13-rowwarp.toml
RW_FACTOR="linear=1.25"
# the next decode rung (stage rungs14d): the experts through cupy's row-warp kernels over the row-warp step. Session
# 13's call 8 (the 48B's experts, one token, bf16): copy gate/up + warp down 34.2 us a layer against triton_prefetch's
# 35.0, x1.02 on the op
MOERW_REG=$TMP/cuda-s14-moe-rowwarp.toml
MOERW_FACTOR="moe_experts=1.02"
# then the F16 linears (KDA's low-rank gates: 60 calls, 0.156 ms a token in session 13's diagnosis) through cupy's
# float-row GEMV, predicted from its own proof's record (bench/perop_factor.py), not from a typed number
FLOATROW_REG=$TMP/cuda-s14-floatrow.toml
# then the Q4_K projections on the tensor cores (cupy_mma, written after session 13's GPU calls), over the newest
# winner, predicted from its proof's record (cupy_rowwarp's time a token over cupy_mma's)
MMA_REG=$TMP/cuda-s14-mma.toml
# session 15's decode rungs (stage rungs15d): the staged row-warp forms (a warp a row from staged activations, for the
# latency Nsight Compute found in session 14), each its own implementation so that one interleaved pair times it:
# linear@Q4_K=cupy_rowwarp_staged over the row-warp step, then moe_experts=cupy_rowwarp_staged over the newest winner,
# each predicted from its proof's record
RWSTG_REG=$TMP/cuda-s15-rowwarp-staged.toml
MOESTG_REG=$TMP/cuda-s15-moe-rowwarp-staged.toml
# session 15's router rung (stage rungs15r): moe_router=cupy_rowwarp (a warp an expert's logit, every load of its row
# at once; the last block of the token routes with shuffles) over the step now, predicted from its proof's record
# against triton_prefetch (the step's router: 7.3 us a layer, 0.19 ms a token in session 14's diagnosis)
ROUTRW_REG=$TMP/cuda-s15-router-rowwarp.toml
# session 17's decode rungs (stage rungs17d, written after session 16's device time), each over the row-warp step
# (both change the tall projections' copy form, so neither is timed over the other): linear@Q4_K=cupy_rowwarp_copy2
# (the rows copied in two groups, the first half decoded while the second lands), predicted from the row-warp
# side-by-side's record; then the norm-and-projection pairs with programmatic dependent launch (add_rmsnorm and
# gated_rmsnorm = triton_pdl let the next kernel start; linear@Q4_K=cupy_rowwarp_pdl requests its weights before it
# waits), predicted from the probe's savings a pair (bench/probes/pdl_chain.py) taken off the side-by-side's time a
# token: 27 tall projections follow an add_rmsnorm (layer 0's follows the first rmsnorm), 20 KDA o_projs a
# gated_rmsnorm. Both are bitwise the step's: the gate proves it on the captured step
RWCOPY2_REG=$TMP/cuda-s17-rowwarp-copy2.toml
# session 17's second decode rung (stage rungs17e, written during session 17): linear@Q4_K=cupy_rowwarp_copy2x (copy2
# with each block's first activations requested before its weight copies: the copy form's x had queued behind them)
# over the row-warp step, predicted from the side-by-side's record
RWCOPY2X_REG=$TMP/cuda-s17-rowwarp-copy2x.toml
RWPDL_REG=$TMP/cuda-s17-norm-rowwarp-pdl.toml
# and the experts: moe_experts=cupy_rowwarp_pdl (cupy_rowwarp's copy/warp pair, both launched with PDL: gate/up waits for
# the router, then lets down start, whose first weight loads overlap gate/up) over the row-warp step, predicted from the
# MoE side-by-side's record against triton_prefetch (the step's)
MOEPDL_REG=$TMP/cuda-s17-moe-rowwarp-pdl.toml
# session 18's rungs (stage rungs18d, written after session 17's device time): the same two PDL rungs with the PDL
# kernels reading x through L1 after their wait (session 17's first kernels read it from L2, __ldcg, and lost: the warp
# form reads 16 bytes of x per weight byte), each over the row-warp step, forecast as before
RWPDL1_REG=$TMP/cuda-s18-norm-rowwarp-pdl-l1.toml
MOEPDL1_REG=$TMP/cuda-s18-moe-rowwarp-pdl-l1.toml
PDLBOTH_REG=$TMP/cuda-s18-pdl-l1-both.toml
# and MLA decode's split and combine with the empty slices of a short context neither written nor read (at d=0+64, 130
# of 132 slices: 8.5 MB of zero sums a layer written, then read), over the row-warp step, forecast from the
# attention side-by-side at pos 63 (perop-attention-bfloat16.json)
ATTNACT_REG=$TMP/cuda-s18-attn-active.toml
# session 22's decode rung (stage rungs22): attention=cupy_splitk_bf16_deep over the row-warp step - MLA decode's
# absorb, combine and up projection with their loads requested before their products (session 21's diagnosis: 7.6,
# 5.3 and 3.9 us a layer for ~8.5 MB each; the absorb's SASS kept ~5 loads ahead). Forecast from the side-by-side at
# pos 63 (perop-attndeep-bfloat16.json)
ATTNDEEP_REG=$TMP/cuda-s22-attn-deep.toml
# session 22's step (stage rungs22all; session 22 ran it by hand, calls 4-5): its four rungs that each timed `none`
# over the row-warp step (the PDL router 1.011 / 1.013, the fused KDA norm 1.006 / 1.007, swiglu 1.002 / 1.004, the
# deep attention 1.009 / 1.011) swapped together: 1.035 / 1.034, again 1.038 / 1.034 - a win, the frontier 417.2 /
# 400.5 tok/s. Four changes under the noise band one by one are one change above it together
S22_REG=$TMP/cuda-s22-all.toml
S22_PAIRS="add_rmsnorm=triton_pdl moe_router=cupy_rowwarp_pdl kda_norm=triton_split swiglu=triton attention=cupy_splitk_bf16_deep"
S22_FACTOR="moe_router=1.399,kda=1.167,gated_rmsnorm=1.167,swiglu=5.994,attention=1.213"  # session 22's per-op records
# session 23's rung (stage rungs23): the earlier nones that session 22's step lacks, together over it - [engine]
# fuse_low_rank (f_b and g_b one block-diagonal linear: 20 launches fewer; session 9: 1.009, 1.010), side_stream (the
# gate GEMVs beside q/k/v; session 19: 1.007 / 1.008) and the PDL GEMVs and experts (session 18: 1.008 / 1.008; the
# norm-PDL half of that rung, add_rmsnorm=triton_pdl, is in the step already; with fuse_kda_norm the o_proj follows
# kda_norm, not gated_rmsnorm, so kda_norm=triton_split_pdl, written after session 22's device time, is the trigger
# that session 18's gated_rmsnorm=triton_pdl was, itself launched with PDL to request its 2 MB of state while the short
# conv finishes: the same bits as triton_split). Forecasts from what was measured: the
# F16 gate GEMVs (three launches a KDA layer, ~2.65 us each) as two, the block-diagonal one reading ~0.5 us more: 7.95
# -> 5.8 us, x1.37; the side stream hid ~25 of their ~157 us a token in session 19 (x1.19, not the x2.0 forecast then);
# both x1.6; session 18's per-op records for the PDL kernels
S23_REG=$TMP/cuda-s23-nones.toml
S23_PDL_PAIRS="linear@Q4_K=cupy_rowwarp_pdl gated_rmsnorm=triton_pdl kda_norm=triton_split_pdl moe_experts=cupy_rowwarp_pdl"
S23_PDL_FACTOR="linear@Q4_K=1.061,moe_experts=1.012"
S23_FACTOR="linear@F16=1.6,$S23_PDL_FACTOR"
S23_LOWRANK_F16=1.37 S23_SIDE_F16=1.19
S23_LOWRANK_REG=$TMP/cuda-s23-lowrank.toml S23_SIDE_REG=$TMP/cuda-s23-side.toml S23_PDL_REG=$TMP/cuda-s23-pdl.toml
# and attention=cupy_splitk_bf16_deep_active (written after session 22's device time): the deep kernels with the
# empty slices of a short context neither written nor read (session 19's active form, 1.007 / 1.001 over the plain
# one), over the step's deep form, forecast from the deep side-by-side's record (deep over deep_active)
S23_ATTN_REG=$TMP/cuda-s23-attn-deep-active.toml
# session 24's rung (stage rungs24): [engine] fuse_kda_gates - a decode step's KDA layers call kda_lowrank_norm (f_b
# and g_b, the two F16 low-rank up-projections, ~2.7 us a launch, 40 launches a token on the 48B, inside the fused
# recurrence and norm) instead of f_b, g_b and kda_norm - with the faster of kda_lowrank_norm=triton_split /
# triton_split_pdl in the proof's side-by-side (perop-kdalowrank-bfloat16.json), over the step now: the rungs23
# registry when decode-s23-nones won (on this machine or SUITE_TIMED), else session 22's step. fuse_low_rank (on in the
# rungs23 registry) is superseded for decode calls by fuse_kda_gates and left on (prefill still uses it). The forecast:
# kda_norm at the record's kda_norm time over the fused form's (the fused kernel takes over kda_norm's time plus the
# up-projections' arithmetic), and linear@F16 from the launches that go - stated estimates, as S23_LOWRANK_F16 is, on
# the ~2.65 us a gate GEMV that estimate rests on: over session 22's step a KDA layer's three F16 GEMVs (f_a|g_a|beta,
# f_b, g_b) become one, x3.0; over the rungs23 registry, whose fuse_low_rank made f_b and g_b one block-diagonal GEMV
# (~3.15 us), its two become one: 5.8 -> 2.65 us, x2.2
S24_REG=$TMP/cuda-s24-gates.toml
S24_F16_OVER_S22=3.0 S24_F16_OVER_S23=2.2
# session 25's rungs (stage rungs25, written after session 24's device time), both over the rungs23 registry and
# forecast on its one diagnosis (diag-decode-s25-base). Session 24's timeline: the fused gates (triton_split) lost,
# 0.980 / 0.982, though faster per op than the chain (154 against 214 us a token), because the f_b|g_b GEMV had run
# on the side stream beside q/k/v (fusing it put its work on the critical path) and a kernel without PDL ended a PDL
# chain (the o_proj after it could no longer start early). Session 23: PDL through a longer chain paid ~2x its per-op
# forecast. So, first: linear=triton_pdl - the default selection, which serves the F16 gate GEMVs alone (the f_a|
# g_a|beta down-projection and the f_b|g_b block-diagonal up-projection, 40 launches a token; Q4_K and Q6_K keep their
# by_type selections), launched with PDL, bit-identical to triton_lastblock - forecast from its side-by-side's
# record (perop-f16pdl-bfloat16.json: triton_lastblock's time a token over triton_pdl's). Then [engine]
# fuse_kda_gates with kda_lowrank_norm=triton_split_pdl, the PDL form chosen though slower per op (173 against 154
# us), forecast on kda_norm from that form's figure in the fused gates' record and on linear@F16 at S24_F16_OVER_S23
S25_F16PDL_REG=$TMP/cuda-s25-f16pdl.toml
S25_GATESPDL_REG=$TMP/cuda-s25-gates-pdl.toml
# and short_conv=triton_pdl (the fused q/k/v short conv, 20 launches a token, the other break in the chain: its window
# and taps requested before the wait, kda_norm's state after it), forecast from its side-by-side record
# (perop-convpdl-bfloat16.json); then both PDL swaps together (decode-s25-chain), first of the four: session 23's
# lesson is that PDL changes pay together more than apart, so the combination is timed before its parts
S25_CONVPDL_REG=$TMP/cuda-s25-conv-pdl.toml
S25_CHAIN_REG=$TMP/cuda-s25-chain.toml
# session 26's rung (stage rungs26, written after session 25's device time): moe_experts=cupy_rowwarp_pdl_shared over
# the step now. Session 25's timeline: the router 5.9 us a layer, the experts' gate/up 18 and down 18. The PDL gate/up
# waits for the router before it copies a row, but the shared expert's rows (1/9 of its bytes) do not depend on the
# router's ids: its blocks go first and request them before the wait. Forecast from the norm-router-experts chain's
# side-by-side (perop-expshared-bfloat16.json), on moe_experts (the chain's norm and router in its denominator: an
# understatement)
S26_EXPSH_REG=$TMP/cuda-s26-exp-shared.toml
# the wide down (stage rungs26w, written in session 26 after its first two calls): moe_experts=cupy_rowwarp_pdl_wide
# over the step now. Session 26's timeline (call 2): a MoE layer's down ends ~18 us after its gate/up, for ~12 MB. The
# PDL down requests 16 of a warp's 36 super-blocks before it waits for gate/up and the other 20 in two groups after;
# the wide form requests all 36 before. Forecast from the chain's side-by-side (perop-expwide-bfloat16.json)
S26_EXPWIDE_REG=$TMP/cuda-s26-exp-wide.toml
# session 27's rung (stage rungs27, written after session 26's device time): moe_experts=cupy_rowwarp_pdl_split over
# the step now. Nsight Compute on the down alone (session 26, call 3): 17.8 us for ~12 MB, 14% of DRAM, ~4.3 warps a
# scheduler, 0.68 eligible, waiting on its loads; the wide form (more loads a warp) was slower. The split down puts
# four warps on an output (a quarter of its super-blocks each): 32 warps an SM at its 64 registers, against ~17.
# Forecast from the chain's side-by-side (perop-expsplit-bfloat16.json)
S27_EXPSPLIT_REG=$TMP/cuda-s27-exp-split.toml
# and the Q8 gate/up (stage rungs27q): Nsight Compute had the float gate/up at ~7.2 instructions a weight, close to
# issue-bound; this form is ~1.3 (x quantized once a block, __dp4a), act_q8. Over the split step when that won
S27_EXPQ8_REG=$TMP/cuda-s27-exp-q8.toml
S28_EXPQ8H_REG=$TMP/cuda-s28-exp-q8h.toml
S29_LINQ8_REG=$TMP/cuda-s29-linear-q8.toml
# session 28's rung (stage rungs30): the pipelined Q8 gate/up. Nsight Compute (session 28, call 2) had the one-wave Q8
# gate/up at 15.8 us for ~24 MB (32% of DRAM): every block requests its rows at once and waits, so no dot overlaps a
# transfer, and x is staged again in each of 1152 blocks. Forecast from the chain's side-by-side against the step's
# experts (perop-expq8p-bfloat16.json: cupy_rowwarp_pdl_q8_hidden's column against cupy_rowwarp_pdl_q8_pipe's)
S30_EXPQ8P_REG=$TMP/cuda-s30-exp-q8p.toml
# and its answer (stage rungs31, written after session 28's device time): the Q8 gate/up's dot loop, 87 instructions a
# lane a super-block for 32 weights in the SASS, made 106 for 64 (a lane a sub-block pair, the scales applied to
# integer sums; tests/test_cuda_dot_loop.py holds it). Forecast as rungs30's, against the step's experts
S31_EXPQ8W_REG=$TMP/cuda-s31-exp-q8w.toml
# session 29's rung (stage rungs32): the lm_head (Q6_K, 310 MB, one launch a token with nothing beside it) on 16-bit
# activations and __dp4a. cupy_float's chunk loop is 6.8 instructions a weight (session 28's SASS), this one's ~3.6.
# Forecast from the lm_head's side-by-side (perop-x16-bfloat16.json: cupy_float's column against cupy_x16_pdl's)
S32_X16_REG=$TMP/cuda-s32-lmhead-x16.toml
# the rungs after session 29 (stages rungs33, rungs34): the Q8 down in a copy form (Nsight Compute, session 29: the
# warp down alone ~12 us for ~12 MB, 20% of DRAM, its 36 super-blocks a warp requested in three dependent groups), and
# session 28's and 29's nones stacked (pairs gate/up 1.014, the Q8 GEMVs 1.005 / 1.008), as session 23 stacked its
S33_EXPQ8C_REG=$TMP/cuda-s33-exp-q8c.toml
S34_STACK_REG=$TMP/cuda-s34-stack.toml
# session 30's lead (stage rungs35): Nsight Compute's source page of the Q8 down put a fifth of its stall samples on
# its expert-id loads (one a round, each a round trip) and a sixth on its hidden-vector loads (issued next to use)
S35_EXPQ8L_REG=$TMP/cuda-s35-exp-q8l.toml
# session 31's rung (stage rungs36): [engine] fuse_router_norm with add_rmsnorm_router=cupy_rowwarp_pdl - a MoE layer's
# residual add, FFN norm and router in one PDL launch (every warp norms the row itself), so the norm's launch (1.7 us
# of a 26-times chain: norm -> router -> gate/up) leaves the critical path; forecast from the chain-and-fused
# side-by-side's record (perop-normrouter-bfloat16.json), taken on moe_router (the pair's time stands for the router's)
S36_NORMROUTER_REG=$TMP/cuda-s36-norm-router.toml
S37_ROUTSORT_REG=$TMP/cuda-s37-router-sorted.toml
S38_SHORTPLAIN_REG=$TMP/cuda-s38-q8-shortplain.toml
S39_Q8TALL_REG=$TMP/cuda-s39-q8-tall.toml
# the fused conv rung (stage rungs40, written after session 33's device time): [engine] fuse_conv_kda with
# short_conv_kda_norm=triton_split_pdl - a KDA layer's merged q|k|v short conv (and its SiLU), recurrence and output
# norm in one PDL launch: the split recurrence's programs convolve their own head's channels, so the conv's launch
# (4.8 us a KDA layer in session 32's timeline, in series with the recurrence's 5.6) leaves the chain; forecast from
# the chain-and-fused side-by-side's record (perop-convkda-bfloat16.json), on short_conv and kda_norm together (the
# fused op takes both ops' time)
S40_CONVKDA_REG=$TMP/cuda-s40-conv-kda.toml
# the shared expert on the side stream (stage rungs41, written in session 34, whose device time was refused): [engine]
# shared_expert_side - a MoE layer's shared expert (1/9 of the 48B's gate/up and down rows, on the critical path after
# the router inside moe_experts) runs as a dense SwiGLU FFN on the side stream beside the router and the routed
# experts, its output added into the residual there; forecast: moe_experts x1.125 (9 experts' rows to 8). No new kernel:
# the linears, swiglu and add_rmsnorm the step selects run it, and moe_experts without a shared expert (the contract's
# None; its CUDA cases prove it). critical_path.py on session 33's H100 timeline: x1.039 at most (gate/up and down x9/8)
S41_SHAREDSIDE_REG=$TMP/cuda-s41-shared-side.toml
# session 34's second rung (stage rungs42): [engine] gates_first with fuse_conv_kda. critical_path.py on session 33's
# timeline: a KDA layer waits on its side stream, whose first GEMV (f_a | g_a | beta, 1.3 MB) is read behind the tall
# q|k|v GEMV's 16 MB and ends ~12 us after the norm; the conv ends beside it. Run first on the main line it ends ~2 us
# after the norm (the tall GEMV 2 us later), and with the conv inside the recurrence's kernel the recurrence waits on
# the tall GEMV alone: x1.027 at a fused tail of 7 us (x1.016 at 8, x1.033 at 6.4); each alone x0.98 / x1.00
S42_GATESCONV_REG=$TMP/cuda-s42-gates-conv.toml
# session 35's rung (stage rungs43): add_rmsnorm=triton_pdl_wait. The step's 54 residual-add norms a token are launched
# after the kernel before ends (a gap of 0.4-0.8 us in session 33's timeline) and request their gain only after the
# summed row's store (a second round trip); the dependent form starts early, requests the gain, then waits.
# critical_path.py: x1.014 for 0.5 us less a norm, x1.022 for 0.8
S43_NORMWAIT_REG=$TMP/cuda-s43-norm-wait.toml
# session 35's second rung (stage rungs44): attention=cupy_splitk_bf16_deep_pdl. An MLA layer's four attention kernels
# follow each other 0.4-0.6 us apart in session 33's timeline, and the o_proj after them took 7.2 us against 5.3 after
# the KDA recurrence (a kernel that lets it start early). critical_path.py: x1.009 (0.3 us a launch, 1 us off the up
# projection and the o_proj each) to x1.015 (0.4, 2 and 1.5)
S44_ATTNPDL_REG=$TMP/cuda-s44-attn-pdl.toml
# the two stacked (stage rungs45): critical_path.py x1.023-1.037
S45_PDLSTACK_REG=$TMP/cuda-s45-pdl-stack.toml
# session 36's rung (stage rungs46): [engine] fuse_moe_norm. Each MoE layer's down ends ~0.4 us before the next
# block's norm starts, which then runs ~1.8-2.0 us on the critical path (session 33's timeline); folded into the
# down's last block it costs that block the row's add and norm instead. critical_path.py with the 26 norms removed and
# the down's end 0.5 / 1 / 1.5 us later: x1.029 / x1.022 / x1.015
S46_MOENORM_REG=$TMP/cuda-s46-moe-norm.toml
# session 36's second rung (stage rungs47): [engine] fuse_oproj_norm. Each attention block's o_proj (the warp-form GEMV)
# is followed by the FFN's residual add and norm, ~2.5-2.8 us from the o_proj's end to the norm's (session 33's
# timeline). critical_path.py with those norms removed and the o_proj's end 1 us later: x1.023 (its selector takes 28
# GEMV-norm pairs a token, the dense layer's FFN down among them, which the option does not fold: over by ~1/28)
S47_OPROJNORM_REG=$TMP/cuda-s47-oproj-norm.toml
# both folds (stage rungs48): x1.046 at 1 us each
S48_FOLDS_REG=$TMP/cuda-s48-norm-folds.toml
# session 37's rung (stage rungs49): the step's gaining nones stacked (session 23's stack of nones won 1.095, twice
# its forecast). rungs45's PDL stack timed x1.018 twice over the s39 step (a none: the tier needs 2%) and `sparkops
# ledger nones --registry cuda-s45-pdl-stack.toml` lists one gaining none that step lacks, the pairs gate/up
# (moe_experts=cupy_rowwarp_pdl_q8_pairs: x1.014 / x1.014 alone in session 29, x1.021 then x1.019 with the Q8 GEMVs in
# session 30). Naive product ~x1.03; a win makes it the step now
S49_NONES_REG=$TMP/cuda-s49-nones.toml
# session 38's rung (stage rungs50): the pairs pair's down with its ids read once a warp, over the s49 step (which
# won x1.035 / x1.033, then x1.038 / x1.037 on an H100): the one gaining none that step lacks
S50_PAIRSLD_REG=$TMP/cuda-s50-pairs-ld.toml
# session 38's second rung (stage rungs51): the activations prefetched into L1 after the wait, in the o_proj-sized warp
# GEMV and the MoE down, whose compiled code loads each round's share only after the round before (nvdisasm)
S51_XPF_REG=$TMP/cuda-s51-xpf.toml
# session 39's rung (stage rungs52): the o_proj-sized warp GEMV with x in registers two rounds at a time (the xpf
# form lost x0.740), stacked with the ids-once down (rungs50: a none three times on two machines)
S52_XRLD_REG=$TMP/cuda-s52-xr-ld.toml
# session 40's rung (stage rungs53): the ids-once down reading the hidden vector from shared memory, copied once a
# block after the wait, over the s52 step
S53_HS_REG=$TMP/cuda-s53-exp-hs.toml
# session 40's second rung (stage rungs54): the ids-once down with its later groups' weights asked into the L2 before
# its wait, over the s52 step (the staged down tied: the hidden vector's round trips were not the down's wait)
S54_L2PF_REG=$TMP/cuda-s54-exp-l2pf.toml
# session 41's rung (stage rungs55): rungs54's none (x1.012 / x1.011 and x1.011 / x1.013, H100) stacked with the PDL
# attention skipping a short context's empty slices (130 of the split's 132 at d=0: 17 MB of zero sums a MLA layer
# written and read), over the s52 step
S55_STACK_REG=$TMP/cuda-s55-stack.toml
# session 42's rung (stage rungs56): the router's picks without pick rounds (GPU session 42's probe: the picks and the
# weights 1.71 of the routing's 2.79 us), over the s55 step
S56_MERGE_REG=$TMP/cuda-s56-router-merge.toml
# session 43's rung (stage rungs57): the l2pf pair's gate/up with its weight copies in three commit groups of
# super-blocks, each dotted as it lands (GPU session 43's probe_gateup: the copies alone 8.96 of the whole 13.57 us, the
# dots 4.0 after a block's last byte), over the s55 step
S57_GROUPED_REG=$TMP/cuda-s57-gu-grouped.toml
# session 46's rung (stage rungs58): the grouped gate/up with one group requested ahead, each later one once the one
# before has landed (GPU session 46's probe_gateup, H100: 12.22 against 13.27 us a call), over the s55 step
S58_STREAMED_REG=$TMP/cuda-s58-gu-streamed.toml
# the timeline the rungs' critical-path forecasts (bench --forecast) replay: session 33's H100 replay of the s39 step,
# committed (a forecast made before the call, the same on every machine)
FORECAST_TIMELINE=bench/gpu-runs/2026-12-05-session33/call5/probe-timeline-now.json
# the s55 step's own replays, session 42's on an H100 and session 43's on an H200 (both committed): the timeline for
# rungs over s55 is the one of the machine kind the call runs on (its tails are that kind's), given to forecast as
# FORECAST_TIMELINE=$S55_TIMELINE forecast ... (older rungs keep theirs: their selectors name s39's kernels)
S55_TIMELINE_H100=bench/gpu-runs/2026-12-06-session42/call3/results-gpu0/probe-timeline-now.json
S55_TIMELINE_H200=bench/gpu-runs/2026-12-06-session43/call5/results-gpu0/probe-timeline-now.json
S55_TIMELINE=$S55_TIMELINE_H100
# (grep reads the whole listing: under pipefail a -q that quits early could fail the pipe on nvidia-smi's SIGPIPE)
if nvidia-smi -L 2>/dev/null | grep H200 > /dev/null; then S55_TIMELINE=$S55_TIMELINE_H200; fi
# session 19's decode rung (stage rungs19): [engine] side_stream over the row-warp step. A KDA layer's three F16 gate
# GEMVs (f_a|g_a|beta, f_b, g_b: 60 launches, 0.157 ms a token in session 18's diagnosis, ~2.6 us each) run on a
# second stream while q/k/v (~11.5 us) and the short conv (~2.3 us) run on the first. Forecast: half their time
# hidden (they share the SMs with a GEMV that is itself latency-bound; nothing measured it yet), linear@F16 x2.0
SIDE_REG=$TMP/cuda-s19-side-stream.toml
SIDE_F16_FACTOR=2.0
NANO_Q4KM=$TMP/k3-nano-q4_k_m.gguf  # the captured gate's model: k3-nano in the 48B's mix, whose KDA layers fork
# session 20's rung (stage rungs20): [engine] side_priority over the side-stream step. Session 19's side stream hid
# ~25 of the gate GEMVs' ~157 us a token; if their blocks waited for SM room behind q/k/v's, a higher-priority
# stream (graphs keep node priorities) starts them first. Forecast: a third of their time more hidden (x1.5)
SIDEPRIO_REG=$TMP/cuda-s20-side-priority.toml
SIDEPRIO_F16_FACTOR=1.5
# and the router with PDL (stage rungs20): add_rmsnorm=triton_pdl lets moe_router=cupy_rowwarp_pdl start, whose warps
# request their 9 KB weight rows before they wait for the norm's output. Over the row-warp step (router triton_prefetch,
# 7.3 us a layer), forecast from the norm-and-router pairs' side-by-side (perop-routerpdl-bfloat16.json)
ROUTPDL_REG=$TMP/cuda-s20-router-pdl.toml
PDL_PAIRS=27
PDL_GATED_PAIRS=20  # KDA's o_proj after its gated_rmsnorm (MLA's follows attention, the dense down swiglu: not PDL)
# the fused-norm rung (stage rungs21, for the GPU session after 19, beside rungs20): [engine] fuse_kda_norm with a fused
# kda_norm over the row-warp step, whose KDA layers run kda=triton then gated_rmsnorm=triton (two launches, the second
# reading back the row the first wrote). Two fused forms: triton, a program a head (the norm needs the whole row: 32
# programs where kda runs 128, and it spills at 128 registers), and triton_split, kda's grid with the norm by each
# head's last program. The rung times the faster in the side-by-side of the chain and both (perop-kdanorm-bfloat16.json),
# forecast from the chain's time over its own, on both ops' diagnosed time
KDANORM_REG=$TMP/cuda-s21-kda-norm.toml
# and swiglu=triton (stage rungs21): the dense layer's SwiGLU in one launch where torch's is five (casts, silu, product,
# cast back), over the row-warp step, forecast from its GPU test's pair (perop-swiglu-bfloat16.json)
SWIGLU_REG=$TMP/cuda-s21-swiglu.toml
# session 16's decode rung (stage rungs16d, written after session 15's device time): linear@Q4_K=cupy_rowhalf (the copy
# form's products in packed half2, two weights an instruction, for the issue-bound GEMVs session 15's counters found)
# over the step now, predicted from the row-warp side-by-side's record (cupy_rowwarp's time a token over its own)
RWHALF_REG=$TMP/cuda-s16-rowhalf.toml
# then the experts' gate/up in the same arithmetic (moe_experts=cupy_rowhalf) over the newest winner, predicted from
# the MoE side-by-side's record against the step's experts (triton_prefetch)
MOEHALF_REG=$TMP/cuda-s16-moe-rowhalf.toml
# and the experts on the tensor cores (cupy_mma), predicted from the MoE side-by-side's record against whichever
# moe_experts the base runs
MOEMMA_REG=$TMP/cuda-s14-moe-mma.toml
# what the best registry is, for the rows' change text: stage_best writes it once it has chosen
best_is() { cat "$TMP/best-kind" 2>/dev/null || echo "the best gated registry (bf16 Triton if it passed the 48B gate, else float32 kernels)"; }
# float32-accurate Triton kernels: what passed the 48B gate at depths 1,64 in session 2, when every bf16 claim
# failed it (later traced to flipped expert choices: the gate now pins routing, see src/sparkops/gate/routing.py
# and bench/gpu-runs/2026-11-29-session3/README.md). Attention: triton_fp32 (16 heads per pass over the cache)
# since session 3, where the busy time grew ~4 ms per token from depth 0 to 32768 and cupy_splitk's float32 path
# (one head per block: the cache read 32 times) is the suspect - inferred from its code, not yet measured per op;
# CUPY_ATTN_REG keeps that one for the rung that measures the change.
FAST_PAIRS="embedding=triton rmsnorm=triton add_rmsnorm=triton linear=triton_fp32 short_conv=triton kda=triton
gated_rmsnorm=triton attention=triton_fp32 moe_router=triton moe_experts=triton_fp32 sample=triton"
# the Triton kernels with bf16 claims (bf16 activations: tensor-core GEMMs for prefill, half the activation bytes)
BF16_PAIRS="embedding=triton rmsnorm=triton add_rmsnorm=triton linear=triton short_conv=triton kda=triton
gated_rmsnorm=triton attention=triton_splitk moe_router=triton moe_experts=triton sample=triton"

# log and left read the clock from bash ($EPOCHSECONDS, bash 5; `date` where older) and log appends without tee: a dry
# run of the suite (tests/bench/test_gpu_suite_dry_run.py, ~200 of them a CI run) spent ~1.5 ms a process on each
log() { local line="== $(( ${EPOCHSECONDS:-$(date +%s)} - T0 ))s [$LANE] $*"; echo "$line"; echo "$line" >> "$OUT/suite.log"; }
left() { echo $(( BUDGET - (${EPOCHSECONDS:-$(date +%s)} - T0) )); }
# marker FILE: a marker file's first line, or nothing (no process: `read`, where $(cat FILE) started one)
marker() { local v=""; [ -r "$1" ] && { IFS= read -r v < "$1" || true; }; printf '%s' "$v"; }
# run NAME MIN_SECONDS CMD...: run CMD if at least MIN_SECONDS are left, never past the budget
# A step that ended (passed or refused, not stopped at the budget) leaves $DONE/NAME holding its exit status,
# and a later call on the same machine skips it (SUITE_REDO=1 runs it again): every call can name the stages
# it wants and carry on where the last one stopped. A step that failed is run again when the code differs from the
# code it failed under (SUITE_CODE_ID: a hash of the sources and tests this call carries; session 12 fixed a kernel
# between two warm calls and the second skipped its test as "done earlier (rc=1)")
DONE=$TMP/suite-done; mkdir -p $DONE
SUITE_CODE_ID=${SUITE_CODE_ID:-$(bash bench/code_id.sh)}  # gpu_lanes.sh exports it once for all its lanes
run() {
  local name=$1 need=$2; shift 2
  # SUITE_SKIP="NAME ...": steps this call leaves out (a stage's other steps still run)
  if [[ " ${SUITE_SKIP:-} " == *" $name "* ]]; then log "$name: left out (SUITE_SKIP)"; return 0; fi
  # SUITE_TIMED="NAME ...": rungs an earlier session timed as wins (their rows are in the ledger): not timed again,
  # and their registries count as timed for now_reg (winners only: check_timed stops a call that names a loser)
  if [[ " ${SUITE_TIMED:-} " == *" $name "* ]]; then  # session 40's call 1 skipped the pair its plan meant to re-time
    log "$name: timed in an earlier session (SUITE_TIMED); not timed again (leave $name out of SUITE_TIMED to re-time it)"
    return 0
  fi
  # another lane running the same step now ($DONE/NAME.running, made atomically by mkdir, holding the owner's pid):
  # wait for its end and take its result, so that two lanes naming one step (a rung's GPU tests) run it once. A
  # marker whose owner is gone (a call killed from outside) is taken over
  claim() { mkdir "$DONE/$name.running" 2>/dev/null && echo $BASHPID > "$DONE/$name.running/pid"; }
  local waited=""
  while [ ! -f "$DONE/$name" ] && ! claim; do
    local owner; owner=$(marker "$DONE/$name.running/pid")
    if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then rm -rf "$DONE/$name.running"; continue; fi
    [ -z "$waited" ] && { log "$name: running in another lane, waiting for it"; waited=1; }
    (( $(left) > 0 )) || { log "SKIP $name: the budget ended while another lane ran it"; return 1; }
    sleep 2
  done
  # (a marker without .code predates the rule, or a test wrote it: kept as it was)
  if [ -f "$DONE/$name" ] && [ "$(marker "$DONE/$name")" != 0 ] && [ -f "$DONE/$name.code" ] && \
      [ "$(marker "$DONE/$name.code")" != "$SUITE_CODE_ID" ]; then
    log "$name: failed earlier on this machine (rc=$(marker "$DONE/$name")) under other code; run again"
    rm -f "$DONE/$name" "$DONE/$name.code"
    claim || true
  fi
  if [ -f "$DONE/$name" ] && [ -z "${SUITE_REDO:-}" ]; then
    # ours, if claim() took it just as the other lane finished
    local mine; mine=$(marker "$DONE/$name.running/pid")
    [ "$mine" = "$BASHPID" ] && rm -rf "$DONE/$name.running"
    log "$name: done earlier on this machine (rc=$(marker "$DONE/$name")), skipped"; return "$(marker "$DONE/$name")"
  fi
  local l; l=$(left)
  if (( l < need )); then rm -rf "$DONE/$name.running"; log "SKIP $name: ${l}s left, it needs ~${need}s"; return 1; fi
  log "$name (limit ${l}s): $*"
  timeout --kill-after=5 "$l" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  log "$name rc=$rc$( ((rc == 124 || rc == 137)) && echo ' (stopped at the budget)')"
  # the registries and the GGUFs are their own markers (a failed swap or synth is tried again)
  [[ $name == swap-* || $name == synth* ]] || ((rc == 124 || rc == 137)) || \
    { echo $rc > "$DONE/$name"; echo "$SUITE_CODE_ID" > "$DONE/$name.code"; }
  # a rung's tier (bench's tier column, B against A): only a decode win makes its registry the step now (now_reg);
  # a prefill pair's win opens its follow-up (rungs9's chunk study). A prefill of one arm (a row against the
  # frontier) has no B against A: no tier is kept for it
  if ((rc == 0)) && { [[ $name == decode-* ]] || [[ $name == prefill-* && " $* " == *" --vs "* ]]; }; then
    if grep -qE "│ +win +│" "$R/$name.log"; then echo win > "$DONE/$name.tier"; else echo "no win" > "$DONE/$name.tier"; fi
  fi
  rm -rf "$DONE/$name.running"
  tail -n 12 "$R/$name.log" | cut -c1-200
  return $rc
}
# record_perops: every side-by-side record the GPU tests wrote under $DJ (SPARKOPS_PEROP_DIR) goes into this machine's
# ledger once (a marker a file's content, made atomically: two lanes packing at once record it once), with the device
# and the command that reproduces it (the record's own test); bench.tgz then carries the rows home
record_perops() {
  local f sum files=() marks=() out="$R/ledger-perop.log"
  for f in "$DJ"/perop-*.json; do
    [ -f "$f" ] || continue
    sum=$(sha256sum "$f" | cut -c1-16)
    mkdir "$DONE/perop-$sum" 2>/dev/null || continue
    files+=("$f")
    marks+=("$DONE/perop-$sum")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  # one call for all (each call renders LADDER.md once: seconds of the budget's margin)
  sparkops ledger perop "${files[@]}" >> "$out" 2>&1 || { log "perop records refused: $(tail -n 1 "$out")"; rm -rf "${marks[@]}"; }
}
# pack_kernels: the two kernel caches as $OUT/kernels.tgz for the next session's first call (carry .kcache, where
# the file is put at home: `cp $FILES_AT/kernels.tgz .kcache/`), within the 16 MiB a file may come back: whole, or
# without Triton's intermediate IRs (ttir, ttgir, llir: a cache hit needs the json and the cubin; the ptx stays for
# the tests that read it), or not at all, said in the log either way
pack_kernels() {
  local f=$OUT/kernels.tgz limit=$((15 * 1024 * 1024)) n
  [ -d "$KCACHE_TRITON" ] || [ -d "$KCACHE_CUPY" ] || return 0
  n=$(find "$KCACHE_TRITON" "$KCACHE_CUPY" -type f 2>/dev/null | wc -l)
  tar czf "$f.new" -C / "${KCACHE_TRITON#/}" "${KCACHE_CUPY#/}" 2>/dev/null
  if [ "$(stat -c %s "$f.new" 2>/dev/null || echo 0)" -gt $limit ]; then
    tar czf "$f.new" --exclude='*.ttir' --exclude='*.ttgir' --exclude='*.llir' -C / "${KCACHE_TRITON#/}" \
        "${KCACHE_CUPY#/}" 2>/dev/null
  fi
  if [ "$(stat -c %s "$f.new" 2>/dev/null || echo 0)" -gt $limit ]; then
    log "kernel caches: $n files, $(du -sh "$f.new" | cut -f1) packed even without the IRs: over the 16 MiB a file may come back, not kept"
    rm -f "$f.new"
    return 0
  fi
  mv "$f.new" "$f"
  log "kernel caches: $n files packed into kernels.tgz ($(du -sh "$f" | cut -f1)); carry .kcache with it next session"
}
# pack_registries: the machine's registries (and what each was made over, .base) as $OUT/registries.tgz
pack_registries() {
  local names
  names=$(cd "$TMP" && ls cuda-*.toml cuda-*.toml.base 2>/dev/null)
  [ -n "$names" ] || return 0
  (cd "$TMP" && tar czf "$OUT/registries.tgz" $names) \
    && log "registries: $(echo "$names" | grep -c 'toml$') packed into registries.tgz; carry .kcache with it next session"
}
pack() {
  record_perops
  # the last lane of a call (gpu_lanes.sh's "final"), or a call of stages run without the lanes
  local stages=${CALL_STAGES:-}
  if [ "$LANE" = final ] || { [ "$LANE" = main ] && [ -n "${stages// /}" ] && [ "${stages// /}" != install ]; }; then
    pack_kernels
    pack_registries
  fi
  cp -f "$TMP"/cuda-*.toml "$DJ"/*.json "$R/" 2>/dev/null
  tar czf "$OUT/results-$LANE.tgz" -C "$R" . 2>/dev/null
  tar czf "$OUT/bench.tgz" -C "$B" . 2>/dev/null
  log "packed: $(du -sh "$R" | cut -f1) of results, scoreboard $(wc -l < "$B/ledger.jsonl" 2>/dev/null || echo 0) rows"
}
trap pack EXIT

ALL_TORCH="embedding=torch rmsnorm=torch add_rmsnorm=torch linear=torch quantize_act=torch rmsnorm_quantize=torch
short_conv=torch kda=torch gated_rmsnorm=torch attention=torch moe_router=torch moe_experts=torch swiglu=torch sample=torch"
# swap_into REGISTRY BASE OP=IMPL...: BASE's selections plus the named ones, proven here; all at once, else one by
# one (an op whose kernel fails its gate keeps BASE's selection, and the log says which)
swap_into() {
  local reg=$1 base=$2; shift 2
  cp "$base" "$reg.new"
  if ! sparkops swap "$@" --device cuda --registry "$reg.new"; then
    echo "-- not all at once; one by one:"
    local pair
    for pair in "$@"; do sparkops swap "$pair" --device cuda --registry "$reg.new" || echo "-- KEPT BASE FOR $pair"; done
  fi
  mv "$reg.new" "$reg"
  echo "$base" > "$reg.base"  # what it was made over (fresh_over)
}
export -f swap_into
# fresh_over REGISTRY BASE: drop a rung's registry made over another base than the one its rung now compares it
# with (session 8: the wide attention's registry, made over the MoE prefetch registry in one call, was timed in the
# next against the router prefetch registry, two changes in one row); the swap then makes it again over BASE
fresh_over() { [ -f "$1" ] && [ "$(marker "$1.base")" != "$2" ] && rm -f "$1" "$1.base"; return 0; }
# --reuse-gate: a passing verdict made on this machine for exactly the same inputs is given back (each two-arm bench
# gates A, B and the fill registry, ~70 s each for the 48B; A and the fill are usually the previous rung's)
GATE="--gate-depths 1,64,4096 --gate-golden $TORCH_REG --bench-dir $B --device cuda --reuse-gate"
FILL="--fill-registry $FILL_REG"  # decode: each depth's context prefilled once, by the fill registry
# the lean prerequisites (prereq_lean) make no float32 registries: the bf16 one fills the contexts then
FILL_LEAN="--fill-registry $BF16_REG"  # (stage rungs6 takes $FILL instead where the fill registry exists)

stage_registries() {
  [ -f $TORCH_REG ] || run swap-torch 60 bash -c 'set -e; cp registry.toml $0.new
      sparkops swap $1 --device cuda --registry $0.new; mv $0.new $0' $TORCH_REG "$ALL_TORCH"
  [ -f $FAST_REG ] || run swap-fast 60 bash -c 'swap_into "$@"' _ $FAST_REG $TORCH_REG $FAST_PAIRS
  # the fill registry: FAST with a prefill attention on tensor cores (triton_splitk: tf32 products on the float32
  # cache). Session 4: triton_fp32's history path (new queries against the cache, tf32x3) ran at ~2 TFLOP/s, so a
  # 131072-token fill slowed to ~60 s per 4096-token chunk at 57k rows and never finished; triton_splitk ran
  # prefill at L=0 3.5x faster in float32 (173 vs 613 ms per layer at T=32768). Its history path at depth is timed
  # by the per-op attention benchmark (prefill T=4096 L=28672). A fill is no figure: the bench proves the depth
  # of the state it leaves, and the arms' decode is what the gate judges and the clock times.
  [ -f $FILL_REG ] || run swap-fill 30 bash -c 'cp $1 $0.new && { sparkops swap attention=triton_splitk --device cuda \
      --registry $0.new || sparkops swap attention=triton_fp32 --device cuda --registry $0.new || \
      sparkops swap attention=torch --device cuda --registry $0.new; } && mv $0.new $0' $FILL_REG $FAST_REG
  [ -f $BF16_REG ] || run swap-bf16 60 bash -c 'swap_into "$@"' _ $BF16_REG $TORCH_REG $BF16_PAIRS
  [ -f $CUPY_ATTN_REG ] || run swap-cupy-attn 20 bash -c 'swap_into "$@"' _ $CUPY_ATTN_REG $FAST_REG attention=cupy_splitk
}
# the best registry the ladder times: the bf16 one where the 48B gate (routing pinned) passes it at 1,64,4096
stage_best() {
  [ -f $BEST_REG ] || choose_best
  # session 5's per-op run at L=131072 (bf16 cache): cupy_splitk_bf16 0.093 ms per layer, triton_splitk 0.154; the
  # rung decode-attn-cupy-bf16 measures the swap end to end in the fused bf16 registry (a bf16 best only: cupy's
  # claim is bf16)
  if [ -f $FUSED_REG ] && grep -q "^the bf16" "$TMP/best-kind" 2>/dev/null && [ ! -f $FUSED_CUPY_ATTN_REG ]; then
    run swap-fused-cupy-attn 20 bash -c 'swap_into "$@"' _ $FUSED_CUPY_ATTN_REG $FUSED_REG attention=cupy_splitk_bf16
  fi
  # session 4's per-op run: the Q6_K lm_head (310 MB a token) took triton 344 us, cupy_dp4a 126 us; Q4_K shapes
  # were mixed (q_proj 8.2 -> 7.7 us, o_proj 12.7 -> 16.2): the rung decode-linear-cupy says what wins end to end
  if [ -f $FUSED_REG ] && grep -q "^the bf16" "$TMP/best-kind" 2>/dev/null && [ ! -f $FUSED_CUPY_LINEAR_REG ]; then
    run swap-fused-cupy-linear 20 bash -c 'swap_into "$@"' _ $FUSED_CUPY_LINEAR_REG $FUSED_REG linear=cupy_dp4a
  fi
  return 0
}
choose_best() {
  [ -f $BF16_REG ] && [ -f $M ] || return 0
  # SUITE_PREFILL_BASE=bf16: the bf16 registry is the base without this 48B gate (~75 s on a fresh machine). Every
  # registry a row times is gated on the 48B by its own bench, so no figure goes ungated; the choice alone is taken
  # from earlier sessions (bf16 has passed the 48B gate every session since session 4)
  if [ "${SUITE_PREFILL_BASE:-}" = bf16 ]; then
    cp $BF16_REG $PREFILL_REG; cp $BF16_REG $BEST_REG
    log "best registry: bf16 (SUITE_PREFILL_BASE; not gated here: each timed registry is gated by its bench)"
    echo "the bf16 Triton registry (attention=triton_splitk; gated by each bench that times it)" > "$TMP/best-kind"
    cp "$TMP/best-kind" "$TMP/prefill-kind"
  elif run gate48-bf16 75 sparkops check --model $M --registry $BF16_REG --golden-registry $TORCH_REG --device cuda \
      --depths 1,64,4096 --json-out "$R/gate48-bf16.json"; then
    cp $BF16_REG $PREFILL_REG; cp $BF16_REG $BEST_REG; log "best registry: bf16"
    echo "the bf16 Triton registry (passed the 48B gate at 1,64,4096; attention=triton_splitk)" > "$TMP/best-kind"
    cp "$TMP/best-kind" "$TMP/prefill-kind"
  elif [ -f $FAST_REG ] && [ -f $FILL_REG ]; then  # refused, or not run in this call's time: the float32 registry
    cp $FILL_REG $PREFILL_REG; cp $FAST_REG $BEST_REG
    echo "the float32 Triton registry (bf16 refused or not gated in time)" > "$TMP/best-kind"
    echo "the float32 Triton registry with the fill's triton_splitk attention (bf16 refused or not gated in time)" \
      > "$TMP/prefill-kind"
    log "best registry: float32 ($([ -f "$DONE/gate48-bf16" ] && echo "the 48B gate refused bf16" || \
      echo "the bf16 gate did not run in time"))"
  else
    log "no best registry: bf16 was not passed by the 48B gate and no float32 registry was made"
  fi
  [ -f $BEST_REG ] && cp $BEST_REG $FUSED_REG && sparkops engine fuse_projections=on --registry $FUSED_REG > /dev/null
  return 0
}
stage_synth() { [ -f $M ] || run synth48 150 sparkops synth --preset kimi-linear-48b-a3b --quant q4_k_m -o $M; }
# a stage that needs the registries and the 48B makes them first on a fresh machine (both are skipped when
# present); under a lock, so that a second lane waits for the first instead of making them again
prereq() {
  exec 9>$TMP/suite-prereq.lock; flock 9; stage_registries; stage_synth; stage_best; flock -u 9
  local f; for f in $TORCH_REG $FAST_REG $FILL_REG $BEST_REG $M; do
    [ -f "$f" ] || { log "SKIP the rest of stage $stage: $f is missing"; return 1; }
  done
}
# the newest registry of the ladder whose own rung timed it (bench rc 0: gated on the 48B and timed) as a win, else
# the fused best; SUITE_NOW_REG names one instead. Session 7's IQ1_S row ran under the linear prefetch registry,
# whose rung had timed 0.983 ("none": inside the 2% noise band, but slower in all 6 pairs): only a win is a step
# forward. SUITE_TIMED names rungs that an earlier session timed as wins
timed() { local t=""; [ -r "$DONE/$1.tier" ] && { IFS= read -r t < "$DONE/$1.tier" || true; }; [ "$t" = win ] || [[ " ${SUITE_TIMED:-} " == *" $1 "* ]]; }
# the ladder's rungs whose registries can be the step now, newest first: RUNG=VARIABLE (the variable naming the
# registry that rung times)
NOW_RUNGS=(
  decode-s58-gu-streamed=S58_STREAMED_REG decode-s57-gu-grouped=S57_GROUPED_REG decode-s56-router-merge=S56_MERGE_REG decode-s55-stack=S55_STACK_REG decode-s54-exp-l2pf=S54_L2PF_REG decode-s53-exp-hs=S53_HS_REG decode-s52-xr-ld=S52_XRLD_REG decode-s51-xpf=S51_XPF_REG decode-s50-pairs-ld=S50_PAIRSLD_REG decode-s49-nones=S49_NONES_REG decode-s48-norm-folds=S48_FOLDS_REG decode-s47-oproj-norm=S47_OPROJNORM_REG decode-s46-moe-norm=S46_MOENORM_REG decode-s45-pdl-stack=S45_PDLSTACK_REG decode-s44-attn-pdl=S44_ATTNPDL_REG decode-s43-norm-wait=S43_NORMWAIT_REG decode-s42-gates-conv=S42_GATESCONV_REG decode-s41-shared-side=S41_SHAREDSIDE_REG decode-s40-conv-kda=S40_CONVKDA_REG
  decode-s39-q8-tall=S39_Q8TALL_REG decode-s38-q8-shortplain=S38_SHORTPLAIN_REG decode-s37-router-sorted=S37_ROUTSORT_REG decode-s36-norm-router=S36_NORMROUTER_REG decode-s35-exp-q8l=S35_EXPQ8L_REG decode-s34-stack=S34_STACK_REG decode-s33-exp-q8c=S33_EXPQ8C_REG decode-s32-lmhead-x16=S32_X16_REG decode-s31-exp-q8w=S31_EXPQ8W_REG decode-s30-exp-q8p=S30_EXPQ8P_REG decode-s29-linear-q8=S29_LINQ8_REG decode-s28-exp-q8h=S28_EXPQ8H_REG decode-s27-exp-q8=S27_EXPQ8_REG decode-s27-exp-split=S27_EXPSPLIT_REG decode-s26-exp-wide=S26_EXPWIDE_REG decode-s26-exp-shared=S26_EXPSH_REG
  decode-s25-chain=S25_CHAIN_REG decode-s25-gates-pdl=S25_GATESPDL_REG decode-s25-f16pdl=S25_F16PDL_REG
  decode-s25-conv-pdl=S25_CONVPDL_REG
  decode-s24-gates=S24_REG decode-s23-nones=S23_REG decode-s22-all=S22_REG
  decode-pdl-l1-both=PDLBOTH_REG decode-moe-pdl-l1=MOEPDL1_REG decode-norm-pdl-l1=RWPDL1_REG decode-linear-rowwarp-copy2x=RWCOPY2X_REG
  decode-moe-rowwarp-pdl=MOEPDL_REG decode-norm-rowwarp-pdl=RWPDL_REG decode-linear-rowwarp-copy2=RWCOPY2_REG
  decode-moe-rowhalf=MOEHALF_REG decode-linear-rowhalf=RWHALF_REG decode-router-rowwarp=ROUTRW_REG decode-moe-rowwarp-staged=MOESTG_REG decode-linear-rowwarp-staged=RWSTG_REG decode-moe-rowwarp=MOERW_REG decode-linear-floatrow=FLOATROW_REG decode-moe-mma=MOEMMA_REG decode-linear-mma=MMA_REG
  decode-linear-rowwarp=RW_REG decode-fuse-lowrank=LOWRANK_REG decode-linear-cupy-float=CUFLOAT_REG decode-lmhead-cupy-float=CUHEAD_REG
  decode-attn-cupy-now=ATTN_REG decode-linear-flat=FLATLIN_REG decode-moe-flat=FLATMOE_REG decode-attn-wide=WIDE_REG
  decode-router-prefetch=ROUTPF_REG decode-linear-prefetch=LINPF_REG decode-moe-prefetch=MOEPF_REG decode-pdl=PDL_REG
  decode-convmerge=CONV_REG decode-lastblock=LB_REG
)
# now_reg [BELOW]: the step now, the newest registry of NOW_RUNGS that exists and whose rung was timed as a win,
# else the fused best. Without an argument SUITE_NOW_REG, when set, is the answer instead. With BELOW (a rung of
# NOW_RUNGS) only the rungs older than BELOW count, and SUITE_NOW_REG does not: the base a rung's registry is made
# over and timed against, never its own registry or a newer one. Session 8: the lm_head rung's base was taken as
# the step now after that rung had won in the call before, i.e. its own registry, so fresh_over dropped the winner
# (its .base named the older one) and every later rung was made over the older registry
# A rung timed as a win whose registry this machine lacks is refused, never passed over for an older one: session 32's
# first call (a fresh H100, no carried registries) made session 23's step but not the x16 step SUITE_TIMED named, so
# rungs34 took cuda-s23-nones.toml as the step now and timed the stack over it (1.168: sessions 28-32's gains
# counted again). now_chain makes those registries first; what it cannot make stops the rung, said on stderr
now_reg() {
  local below=${1:-} pair var older=""
  if [ -z "$below" ] && [ -n "${SUITE_NOW_REG:-}" ]; then echo "$SUITE_NOW_REG"; return 0; fi
  [ -z "$below" ] && older=1
  for pair in "${NOW_RUNGS[@]}"; do
    if [ -z "$older" ]; then [ "${pair%%=*}" = "$below" ] && older=1; continue; fi
    var=${pair#*=}
    timed "${pair%%=*}" || continue
    [ -f "${!var}" ] && { echo "${!var}"; return 0; }
    echo "now_reg: ${pair%%=*} won, but its registry $(basename "${!var}") is not on this machine: no older step" \
        "stands in for it (now_chain makes it; or run its stage first)" >&2
    return 1
  done
  # a name that is no rung of NOW_RUNGS is a mistake in this script: no base, said on stderr (not in the value)
  [ -z "$older" ] && { echo "now_reg: $below is no rung of NOW_RUNGS" >&2; return 1; }
  echo "$FUSED_REG"
}
# now_pairs RUNG: the swaps (and, after a '+', the [engine] options) that made the registry of RUNG, a rung after
# session 23's step, over the rung before it: the same choices its rung function makes (sN_rung above and below).
# No recipe (session 24's and 25's rungs, made by their own stages): false
now_pairs() {
  case $1 in
    decode-s26-exp-shared) echo moe_experts=cupy_rowwarp_pdl_shared ;;
    decode-s26-exp-wide) echo moe_experts=cupy_rowwarp_pdl_wide ;;
    decode-s27-exp-split) echo moe_experts=cupy_rowwarp_pdl_split ;;
    decode-s27-exp-q8) if timed decode-s27-exp-split; then echo moe_experts=cupy_rowwarp_pdl_q8_split
      else echo moe_experts=cupy_rowwarp_pdl_q8; fi ;;
    decode-s28-exp-q8h) echo moe_experts=cupy_rowwarp_pdl_q8_hidden ;;
    decode-s29-linear-q8) echo linear@Q4_K=cupy_rowwarp_pdl_q8 ;;
    decode-s30-exp-q8p) echo moe_experts=cupy_rowwarp_pdl_q8_pipe ;;
    decode-s31-exp-q8w) echo moe_experts=cupy_rowwarp_pdl_q8_pairs ;;
    decode-s32-lmhead-x16) echo linear@Q6_K=cupy_x16_pdl ;;
    decode-s33-exp-q8c) echo moe_experts=cupy_rowwarp_pdl_q8_hidden_cp ;;
    decode-s34-stack) if timed decode-s33-exp-q8c; then echo moe_experts=cupy_rowwarp_pdl_q8_pairs_cp \
        linear@Q4_K=cupy_rowwarp_pdl_q8; else echo moe_experts=cupy_rowwarp_pdl_q8_pairs linear@Q4_K=cupy_rowwarp_pdl_q8; fi ;;
    decode-s35-exp-q8l) if timed decode-s34-stack; then echo moe_experts=cupy_rowwarp_pdl_q8_pairs_ld
      else echo moe_experts=cupy_rowwarp_pdl_q8_hidden_ld; fi ;;
    decode-s36-norm-router) echo add_rmsnorm_router=cupy_rowwarp_pdl + fuse_router_norm=on ;;
    decode-s37-router-sorted) echo moe_router=cupy_rowwarp_pdl_sorted ;;
    decode-s38-q8-shortplain) echo linear@Q4_K=cupy_rowwarp_pdl_q8_shortplain ;;
    decode-s39-q8-tall) echo linear@Q4_K=cupy_rowwarp_pdl_q8_tall ;;
    decode-s40-conv-kda) echo short_conv_kda_norm=triton_split_pdl + fuse_conv_kda=on ;;
    decode-s41-shared-side) echo + side_stream=on shared_expert_side=on ;;
    decode-s42-gates-conv) echo short_conv_kda_norm=triton_split_pdl + side_stream=on gates_first=on fuse_conv_kda=on ;;
    decode-s43-norm-wait) echo add_rmsnorm=triton_pdl_wait ;;
    decode-s44-attn-pdl) echo attention=cupy_splitk_bf16_deep_pdl ;;
    decode-s49-nones) echo add_rmsnorm=triton_pdl_wait attention=cupy_splitk_bf16_deep_pdl \
      moe_experts=cupy_rowwarp_pdl_q8_pairs ;;
    decode-s45-pdl-stack) echo add_rmsnorm=triton_pdl_wait attention=cupy_splitk_bf16_deep_pdl ;;
    decode-s50-pairs-ld) echo moe_experts=cupy_rowwarp_pdl_q8_pairs_ld ;;
    decode-s51-xpf) echo $S51_PAIRS ;;
    decode-s52-xr-ld) echo $S52_PAIRS ;;
    decode-s53-exp-hs) echo moe_experts=cupy_rowwarp_pdl_q8_pairs_hs ;;
    decode-s54-exp-l2pf) echo moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf ;;
    decode-s55-stack) echo $S55_PAIRS ;;
    decode-s56-router-merge) echo moe_router=cupy_rowwarp_pdl_merge ;;
    decode-s57-gu-grouped) echo moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_grouped ;;
    decode-s58-gu-streamed) echo moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_streamed ;;
    decode-s46-moe-norm) echo moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm + fuse_moe_norm=on ;;
    decode-s47-oproj-norm) echo linear_add_rmsnorm=cupy_rowwarp_pdl_norm + fuse_oproj_norm=on ;;
    decode-s48-norm-folds) echo moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm \
        linear_add_rmsnorm=cupy_rowwarp_pdl_norm + fuse_moe_norm=on fuse_oproj_norm=on ;;
    *) return 1 ;;
  esac
}
# now_chain STAGE: on a machine that made session 23's step, every later rung timed as a win (SUITE_TIMED, or this
# machine's tier) whose registry is missing made again by its swaps over the one before, oldest first (each swap
# proves its pairs on this machine; nothing is timed): so that now_reg finds the step now itself. A rung with no
# recipe, or whose swap fails, stops here: false, said, and now_reg refuses the rungs above it
now_chain() {
  local i rung var reg base pairs swaps opts after=""
  for ((i = ${#NOW_RUNGS[@]} - 1; i >= 0; i--)); do  # oldest first
    rung=${NOW_RUNGS[$i]%%=*} var=${NOW_RUNGS[$i]#*=}
    [ "$rung" = decode-s23-nones ] && { after=1; continue; }
    [ -n "$after" ] || continue  # session 23's step and older: s23_step and the stages before it make them
    timed "$rung" || continue
    reg=${!var}
    [ -f "$reg" ] && continue  # made on this machine (or carried): its own rung function keeps it or makes it again
    base=$(now_reg "$rung") || { log "$1: no step below $rung"; return 1; }
    pairs=$(now_pairs "$rung") || { log "$1: $rung won, but it has no recipe here (now_pairs): run its stage first"
      return 1; }
    swaps=${pairs%%+*} opts=""
    [[ $pairs == *+* ]] && opts=${pairs#*+ }
    log "$1: $rung won in an earlier call; its registry made again over $(basename "$base"): $pairs"
    # shellcheck disable=SC2086 # word lists
    if [ -z "$opts" ]; then
      swap_all "${rung#decode-}" "$reg" "$base" "$swaps" || { log "$1: $rung's registry was not made"; return 1; }
    elif [ -z "${swaps// /}" ]; then  # [engine] options alone (shared_expert_side): the base with them on
      cp "$base" "$reg.new" && sparkops engine $opts --registry "$reg.new" > /dev/null && mv "$reg.new" "$reg" \
          && echo "$base" > "$reg.base" || { log "$1: $rung's registry was not made"; return 1; }
    else
      swap_all "${rung#decode-}" "$reg.swap" "$base" "$swaps" && cp "$reg.swap" "$reg.new" \
          && sparkops engine $opts --registry "$reg.new" > /dev/null && mv "$reg.new" "$reg" && echo "$base" > "$reg.base" \
          || { log "$1: $rung's registry was not made"; return 1; }
    fi
  done
  return 0
}
# now_step STAGE: NOW_REG, the step now on this machine: session 22's step (made by swaps), session 23's over it when
# its rung won (SUITE_TIMED or this machine's tier) and every later winner made by now_chain, so that now_reg finds
# it; false, said, where one cannot be made
now_step() {
  s22_step $1 || return 1
  if timed decode-s23-nones && ! s23_step; then log "$1: no session-23 step ($S23_REG)"; return 1; fi
  timed decode-s23-nones && { now_chain $1 || return 1; }
  NOW_REG=$(now_reg) || { log "$1: no step now on this machine"; return 1; }
  log "the step now: $NOW_REG"
}
# the lean prerequisites of stage rungs6: the torch registry (the golden) and the bf16 one, the 48B, and bf16 as
# the best once the 48B gate passes it (no float32 registries: ~100 s less on a fresh machine)
prereq_lean() {
  exec 9>$TMP/suite-prereq.lock; flock 9
  # the 48B's synthesis (CPU work, ~60 s on a fresh machine) runs beside the registries' swaps (the GPU and Triton's
  # cold compiles, ~100 s): session 12's fresh calls ran them one after the other
  local synth_pid=""
  [ -f $M ] || { stage_synth & synth_pid=$!; }
  [ -f $TORCH_REG ] || run swap-torch 60 bash -c 'set -e; cp registry.toml $0.new
      sparkops swap $1 --device cuda --registry $0.new; mv $0.new $0' $TORCH_REG "$ALL_TORCH"
  [ -f $BF16_REG ] || run swap-bf16 60 bash -c 'swap_into "$@"' _ $BF16_REG $TORCH_REG $BF16_PAIRS
  [ -n "$synth_pid" ] && wait "$synth_pid"
  stage_synth  # (made: nothing to do; failed: tried again, in the open)
  [ -f $BEST_REG ] || choose_best
  flock -u 9
  local f; for f in $TORCH_REG $BF16_REG $BEST_REG $FUSED_REG $M; do
    [ -f "$f" ] || { log "SKIP the rest of stage $stage: $f is missing"; return 1; }
  done
}

# iq1s_pair ROW DIAG BASE NEW OP@IQ1_S=IMPL SWAP CHANGE: one of rungs_iq1s's rows at 131072 on the IQ1_S 48B: BASE
# diagnosed (diagnose-DIAG, the prediction), then BASE against NEW, one CUDA graph per step, --expect $IQ1S_EXPECT;
# left out, saying so, where there is no IQ1_S model or NEW does not select the implementation (SWAP kept the base)
iq1s_pair() {
  local row=$1 diag=$2 base=$3 new=$4 sel=$5 swap=$6 change=$7
  if [ -f $M1 ] && [ -f $new ] && python3 bench/registry_selects.py $new $sel > /dev/null; then
    run diagnose-$diag 200 sparkops diagnose --model $M1 --device cuda --depth 131072 --registry $base $FILL_LEAN \
        --out "$R/diag-$diag" --json-out $DJ/diag-$diag.json --record
    [ -s $DJ/diag-$diag.json ] && run $row 300 sparkops bench decode --model $M1 --depth 131072 --tokens 16 \
        --repeats 6 --chunk 4096 --registry $base --vs $new --graph A,B $GATE $FILL_LEAN --changes ${sel%%=*} \
        --prediction $DJ/diag-$diag.json --expect "$IQ1S_EXPECT" --change "$change"
  else log "$row: left out (no IQ1_S model, or the swap kept the base: see $swap)"; fi
}
# the GPU proofs of session 7's rungs (their GPU tests and launch-shape studies), one function each: stage rungs7
# runs each before its rungs; stage proofs7 runs them all in another lane (no prerequisites), and run() lets a
# step that one lane is running be waited for by the other, not run twice
proof_prefetch() {
  run gpu-tests-prefetch 90 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k prefetch \
      tests/backends/test_triton_moe.py tests/backends/test_triton_linear.py tests/backends/test_triton_moe_router.py \
      --junitxml="$R/gpu-tests-prefetch.xml"
  run tune-prefetch 60 python3 -m sparkops_triton._tune moe_decode_prefetch lm_head_prefetch linear_gemv_prefetch
}
proof_wide() {
  run gpu-tests-wide 60 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k wide tests/backends/test_triton_attention.py \
      --junitxml="$R/gpu-tests-wide.xml"
}
proof_cupy_float() {  # linear=cupy_float (session 8): accuracy at the 48B shapes, then timed beside the others
  # -k selects by the implementation's name too: the side-by-side timing test that predicts both rungs has no
  # "linear" in its name (session 9's proof ran without it)
  run gpu-tests-cupy-float 60 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k "linear or float" \
      tests/backends/test_cupy_kernels.py tests/backends/test_cupy_timing.py --junitxml="$R/gpu-tests-cupy-float.xml"
}
# attention_rungs TAG ATTN RECORD FORCED FALLBACK TEXT IQ1S_BASE: attention=ATTN at 131072 after gpu-tests-TAG passed:
# one pair on the Q4_K 48B over the step now (decode131k-TAG, its base diagnosed first: diagnose-TAG-131k), then one
# on the IQ1_S 48B over IQ1S_BASE (else the newest IQ1_S step on the machine made from the step now, not an earlier
# attention rung's) - decode131k-iq1s-TAG. The forecast: attention=FORCED if given, else the factor of the GPU
# tests' side-by-side record (perop-RECORD-bfloat16.json: the step's attention against ATTN), else FALLBACK; with
# none of them the rows are left out. Returns 1 where the stage has nothing more to do.
attention_rungs() {
  local tag=$1 attn=$2 record=$3 forced=$4 fallback=$5 text=$6 iq1s_base=$7 factor reg
  [ "$(marker $DONE/gpu-tests-$tag)" = 0 ] || { log "decode131k-$tag: left out (its GPU tests failed)"; return 1; }
  now_step rungs_$tag || return 1
  factor=$(perop $record cupy_splitk_bf16_deep_active_pdl $attn)
  if [ -n "$forced" ] || [ -z "$factor" ]; then
    factor=${forced:-$fallback}
    [ -n "$factor" ] || { log "rungs_$tag: left out (no side-by-side record, so no forecast)"; return 1; }
    log "rungs_$tag: attention=$factor by bytes (forced, or no record)"
  else log "rungs_$tag: attention=$factor from perop-$record-bfloat16.json"; fi
  local expect=attention=$factor
  reg=${NOW_REG%.toml}-$tag.toml
  fresh_over $reg $NOW_REG
  [ -f $reg ] || run swap-$tag 60 bash -c 'swap_into "$@"' _ $reg $NOW_REG attention=$attn
  if [ -f $M ] && [ -f $reg ] && python3 bench/registry_selects.py $reg attention=$attn > /dev/null; then
    run diagnose-$tag-131k 200 sparkops diagnose --model $M --device cuda --depth 131072 --registry $NOW_REG \
        $FILL_LEAN --out "$R/diag-$tag-131k" --json-out $DJ/diag-$tag-131k.json --record
    [ -s $DJ/diag-$tag-131k.json ] && run decode131k-$tag 330 sparkops bench decode --model $M --depth 131072 \
        --tokens 16 --repeats 6 --chunk 4096 --registry $NOW_REG --vs $reg --graph A,B $GATE $FILL_LEAN \
        --changes attention --prediction $DJ/diag-$tag-131k.json --expect "$expect" \
        --change "attention=$attn: $text, over $(basename $NOW_REG), one CUDA graph per step"
  else log "decode131k-$tag: left out (no Q4_K model, or the swap kept the step's attention: see swap-$tag)"; fi
  # the IQ1_S row (issue #10: >= 1000 tok/s at 131072, where the bf16 cache is half the step's bytes)
  local base=${iq1s_base:-$(ls -t ${NOW_REG%.toml}-iq1s*.toml 2>/dev/null \
      | grep -v -E -- '-(fp8|twin|bulk|qreg|fp8_qreg|l2pf|ring)\.toml$' \
      | head -1)}
  [ -n "$base" ] && [ -f "$base" ] || { log "decode131k-iq1s-$tag: left out (no IQ1_S step on this machine)"; return 1; }
  local new=${base%.toml}-$tag.toml
  fresh_over $new $base
  [ -f $new ] || run swap-iq1s-$tag 60 bash -c 'swap_into "$@"' _ $new $base attention=$attn
  IQ1S_EXPECT=$expect
  iq1s_pair decode131k-iq1s-$tag iq1s-$tag-131k $base $new attention=$attn swap-iq1s-$tag \
      "attention=$attn: $text, over $(basename $base), one CUDA graph per step (IQ1_S mix)"
}
# proof_attention TAG TESTFILE RECORD: an attention form's GPU tests (its file, and its case of test_cupy_kernels.py's
# PDL chain, selected by -k TAG), its side-by-side record perop-RECORD-bfloat16.json kept on the machine for the rung's
# --expect, then Nsight Compute on the first launch of the one-group split and of the form's own split (SPLIT below)
# where ncu runs. Stages rungs_TAG run it first; proofs_TAG alone.
proof_attention() {
  local tag=$1 file=$2 record=$3 split=$4 name
  run gpu-tests-$tag 180 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k $tag \
      tests/backends/$file tests/backends/test_cupy_kernels.py --junitxml="$R/gpu-tests-$tag.xml"
  [ -s "$DJ/perop-$record-bfloat16.json" ] && cp "$DJ/perop-$record-bfloat16.json" "$R/"
  command -v ncu > /dev/null || { log "probe-ncu-$tag: no ncu on this machine; nothing profiled"; return 0; }
  for name in mla_split_mma_pdl $split; do
    run probe-ncu-$name 90 ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
        -k "regex:$name\$" --launch-count 1 python3 -m pytest -q -m gpu -p no:cacheprovider -k side_by_side \
        tests/backends/$file
  done
  return 0
}
proof_twin() { proof_attention twin test_cupy_attention_twin.py attntwin mla_split_twin_pdl; }
proof_bulk() { proof_attention bulk test_cupy_attention_bulk.py attnbulk mla_split_bulk_pdl; }
proof_qreg() { proof_attention qreg test_cupy_attention_qreg.py attnqreg mla_split_qreg_pdl; }
proof_fp8_qreg() { proof_attention fp8_qreg test_cupy_attention_fp8_qreg.py attnfp8_qreg mla_split_qreg_fp8_pdl; }
proof_l2pf() { proof_attention l2pf test_cupy_attention_l2pf.py attnl2pf mla_split_l2pf_pdl; }
proof_ring() { proof_attention ring test_cupy_attention_ring.py attnring mla_split_ring_pdl; }
# what each split rung's ledger row says it changed (rungs_split)
declare -A SPLIT_TEXT=([qreg]="the queries-in-registers split (each warp's quarter of the queries held in registers)"
                       [bulk]="the bulk split (each tile's rows by the copy engine, one bulk copy a row)"
                       [fp8_qreg]="the MLA cache in float8_e4m3fn with the queries-in-registers split (three fp8 \
stages: two tiles in flight)"
                       [l2pf]="the L2-prefetching split (each tile asked of the L2 a tile ahead of its copies)"
                       [ring]="the ring split (the qreg split's tiles as half-tiles in five slots: 1.5 tiles in \
flight)")
# and the implementation each tag names
declare -A SPLIT_IMPL=([qreg]=cupy_splitk_bf16_qreg_active_pdl [bulk]=cupy_splitk_bf16_bulk_active_pdl
                       [fp8_qreg]=cupy_splitk_fp8_qreg_active_pdl [l2pf]=cupy_splitk_bf16_l2pf_active_pdl
                       [ring]=cupy_splitk_bf16_ring_active_pdl)
# split_pick: prints the tag (qreg, bulk, fp8_qreg, l2pf or ring) of the split whose GPU tests passed on this machine
# and whose side-by-side record (perop-attnTAG-bfloat16.json) has it fastest against the step's one-group split, if at
# least SUITE_SPLIT_MIN (1.05); says each figure (in the suite's log and on stderr: stdout is the tag); fails, saying
# so, where none qualifies
split_pick() {
  local tag f best="" bestf=${SUITE_SPLIT_MIN:-1.05}
  for tag in qreg bulk fp8_qreg l2pf ring; do
    f=""
    [ "$(marker $DONE/gpu-tests-$tag)" = 0 ] && f=$(perop attn$tag cupy_splitk_bf16_deep_active_pdl \
        ${SPLIT_IMPL[$tag]})
    log "rungs_split: $tag x${f:-? (no passed tests or no record)} per op" >&2
    [ -n "$f" ] && awk -v a="$f" -v b="$bestf" 'BEGIN { exit !(a + 0 >= b + 0) }' && { best=$tag; bestf=$f; }
  done
  [ -n "$best" ] || { log "rungs_split: no split reaches x${SUITE_SPLIT_MIN:-1.05} per op: no rung"; return 1; } >&2
  log "rungs_split: the $best split (x$bestf per op)" >&2
  echo $best
}
# the fp8 attention's GPU tests (stage rungs_fp8 runs them first; proofs_fp8 alone, e.g. in a cheap call), its
# side-by-side record perop-attnfp8-bfloat16.json kept on the machine for the rung's --expect
proof_fp8() {
  run gpu-tests-fp8 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_cupy_attention_fp8.py --junitxml="$R/gpu-tests-fp8.xml"
  [ -s "$DJ/perop-attnfp8-bfloat16.json" ] && cp "$DJ/perop-attnfp8-bfloat16.json" "$R/" ; return 0
}
# perop NAME BEFORE AFTER: the factor of a side-by-side GPU test's record ($DJ/perop-NAME-bfloat16.json, written by the
# rung's proof), BEFORE's time a token over AFTER's; nothing when there is no record (the rung is then left out)
perop() { python3 bench/perop_factor.py "$DJ/perop-$1-bfloat16.json" "$2" "$3" || true; }
# diagnose_base NAME BASE: the diagnosis of rung decode-NAME's base at 0 and 32768 ($DJ/diag-decode-NAME.json, its
# forecast's per-op times), recorded in the machine's ledger (a row a depth: the per-kernel figures write-ups quote)
diagnose_base() {
  run diagnose-decode-$1 90 sparkops diagnose --model $M --device cuda --depth 0,32768 --registry $2 $FILL_LEAN \
      --out "$R/diag-decode-$1" --json-out $DJ/diag-decode-$1.json --record
}
# proven_with_factor NAME TESTS FACTOR: true when gpu-tests-TESTS passed on this machine and FACTOR is not empty; else
# rung decode-NAME is said to be left out
proven_with_factor() {
  if [ "$(marker $DONE/gpu-tests-$2)" != 0 ] || [ -z "$3" ]; then
    log "decode-$1: left out (its GPU tests failed, or their record gave no factor)"
    return 1
  fi
}
# decode_rung NAME REGISTRY PAIR CHANGES EXPECT TESTS TEXT [BASE]: rung decode-NAME over the step now (now_reg below
# it; or over BASE) at 0 and 32768 - the base's diagnosis, the swap, the pair predicted by EXPECT (OP=FACTOR) - when
# gpu-tests-TESTS passed on this machine and EXPECT has a factor; else said and left out
decode_rung() {
  local name=$1 reg=$2 pair=$3 changes=$4 expect=$5 tests=$6 text=$7 base=${8:-}
  [ -n "$base" ] || base=$(now_reg decode-$name)
  proven_with_factor $name $tests "${expect#*=}" || return 0
  diagnose_base $name $base
  fresh_over $reg $base
  [ -f $reg ] || run swap-$name 30 bash -c 'swap_into "$@"' _ $reg $base $pair
  [ -f $reg ] && [ -s $DJ/diag-decode-$name.json ] && run decode-$name 150 sparkops bench decode --model $M \
      --depth 0,32768 --tokens 64 --repeats 6 --registry $base --vs $reg --graph A,B $GATE $FILL_LEAN --changes $changes \
      --prediction $DJ/diag-decode-$name.json --expect "$expect" --change "$pair: $text, over $(basename $base), graph"
  return 0
}
# rowwarp_step STAGE: the decode step rebuilt by swaps through session 13's row-warp rung ($RW_REG; SUITE_TIMED names
# its rows), the base of session 17's and 18's rungs; false without the lean prerequisites or (said in the log) without
# the row-warp step
rowwarp_step() {
  prereq_lean || return 1
  decode_chain
  timed decode-linear-rowwarp && rebuild_over linear-rowwarp $RW_REG "$(now_reg decode-linear-rowwarp)" \
      linear@Q4_K=cupy_rowwarp
  [ -f $RW_REG ] || { log "$1: no row-warp step ($RW_REG): SUITE_TIMED must name decode-linear-rowwarp"; return 1; }
}
proof_rowwarp() {  # linear@Q4_K=cupy_rowwarp (session 13): every row from NaN, every form, then timed beside triton;
  # the contract on CUDA of cupy_rowwarp and cupy_rowwarp_staged (session 14) for both ops
  run gpu-tests-rowwarp 90 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k rowwarp \
      tests/backends/test_cupy_kernels.py tests/backends/test_cupy_timing.py tests/backends/test_cupy_gate.py \
      --junitxml="$R/gpu-tests-rowwarp.xml"
}
proof_router_pdl() {  # moe_router=cupy_rowwarp_pdl (session 19, not yet on a GPU): cupy_rowwarp's bits eagerly and from
  # a graph of norm-and-router pairs after a triggering norm, the router's GPU tests and contract on CUDA, then the
  # pairs timed side by side (its record, $DJ/perop-routerpdl-bfloat16.json, is the rung's forecast)
  run gpu-tests-router-pdl 120 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k router tests/backends/test_cupy_pdl.py tests/backends/test_cupy_moe_router.py tests/backends/test_cupy_gate.py \
      tests/backends/test_cupy_timing.py --junitxml="$R/gpu-tests-router-pdl.xml"
}
proof_kda_norm() {  # kda_norm=triton / triton_pdl / triton_split (session 20; passed in 21) / triton_split_pdl (22): the
  # contract on CUDA, the triggering forms' bits, the 48B's decode step against the unfused chain, then the chain and
  # the fused forms timed side by side (its record, $DJ/perop-kdanorm-bfloat16.json, is the rung's forecast); the
  # engine option's captured step
  run gpu-tests-kda-norm 120 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_triton_kda_norm.py tests/engine/test_kda_norm_fusion.py --junitxml="$R/gpu-tests-kda-norm.xml"
}
proof_swiglu() {  # swiglu=triton (session 20; passed in 21: 1.76 against torch's 9.89 us): the contract, then the 48B's dense
  # row timed beside torch's (its record, $DJ/perop-swiglu-bfloat16.json, is the rung's forecast)
  run gpu-tests-swiglu 60 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_triton_swiglu.py --junitxml="$R/gpu-tests-swiglu.xml"
}
# kda_norm_rung: over the row-warp step, the faster of kda_norm's two fused forms in the proof's side-by-side (triton:
# a program a head; triton_split: kda's grid, the norm by the head's last program) by swap (proven there) and [engine]
# fuse_kda_norm on, the captured gate of k3-nano in the 48B's mix, then the pair predicted on kda and gated_rmsnorm
# alike (the fused kernel stands for both: the chain's time over its own); left out, saying why, without the proof or
# its record
kda_norm_rung() {
  local name=kda-norm base=$RW_REG reg=$KDANORM_REG impl factor=""
  impl=$(python3 bench/perop_factor.py "$DJ/perop-kdanorm-bfloat16.json" --fastest triton triton_split || true)
  [ -n "$impl" ] && factor=$(perop kdanorm chain $impl)
  proven_with_factor $name kda-norm "$factor" || return 0
  diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ]; then
    run swap-$name 30 bash -c 'swap_into "$@"' _ $reg.swap $base kda_norm=$impl
    [ -f $reg.swap ] && cp $reg.swap $reg.new && sparkops engine fuse_kda_norm=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-$name.json ] && run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $base --vs $reg --graph A,B $GATE $FILL_LEAN --changes engine,kda_norm \
      --prediction $DJ/diag-decode-$name.json --expect "kda=$factor,gated_rmsnorm=$factor" --change "[engine] \
fuse_kda_norm with kda_norm=$impl (the faster fused form in its side-by-side): a KDA layer's recurrence and output \
norm in one kernel, over $(basename $base), graph"
  return 0
}
proof_side_stream() {  # [engine] side_stream (session 19): the same bits with and without it, eager and captured,
  # split-K GEMVs counting arrivals on both lanes at once; the side launches on the side stream; a branch a KDA layer
  # in the captured graph (tests/engine/test_side_stream.py)
  run gpu-tests-side 120 python3 -m pytest -q -rP -m gpu -p no:cacheprovider tests/engine/test_side_stream.py \
      --junitxml="$R/gpu-tests-side.xml"
}
# engine_rung NAME BASE REG OPTION EXPECT TEXT: an [engine] option's rung - REG made over BASE by `sparkops engine
# OPTION=on`, after the side stream's GPU tests and the captured gate of k3-nano in the 48B's mix (its KDA layers
# fork; the 48B's own gate in the pair runs eagerly, pinned), timed over BASE with --changes engine
engine_rung() {
  local name=$1 base=$2 reg=$3 option=$4 expect=$5 text=$6
  if [ "$(marker $DONE/gpu-tests-side)" != 0 ]; then
    log "decode-$name: left out (its GPU tests failed)"
    return 0
  fi
  [ -f $base ] || { log "decode-$name: left out (no base $base)"; return 0; }
  diagnose_base $name $base
  engine_over $reg $base $option
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-$name.json ] && run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $base --vs $reg --graph A,B $GATE $FILL_LEAN --changes engine \
      --prediction $DJ/diag-decode-$name.json --expect "$expect" --change "[engine] $option: $text, over \
$(basename $base), graph"
  return 0
}
# captured_gate NAME REG: the captured-step gate of REG on k3-nano in the 48B's mix (synthesized once); false, with
# decode-NAME said to be left out, when it did not pass (or REG is missing)
captured_gate() {
  [ -f $NANO_Q4KM ] || run synth-nano-q4km 30 sparkops synth --preset k3-nano --quant q4_k_m -o $NANO_Q4KM
  [ -f $2 ] && run gate-captured-$1 60 sparkops check --model $NANO_Q4KM --registry $2 --device cuda --captured
  if [ "$(marker $DONE/gate-captured-$1)" != 0 ]; then
    log "decode-$1: left out (the captured gate did not pass)"
    return 1
  fi
}
# engine_over REG BASE OPTION: REG is BASE with [engine] OPTION = true (made again when BASE moved: fresh_over)
engine_over() {
  fresh_over $1 $2
  if [ ! -f $1 ] && [ -f $2 ]; then
    cp $2 $1.new && sparkops engine $3=on --registry $1.new > /dev/null && mv $1.new $1 && echo "$2" > $1.base
  fi
  return 0
}
# swap_all NAME REG BASE PAIRS: REG is BASE with every pair of PAIRS (a word list) swapped in by one swap step
# (swap-NAME), made again when BASE moved; a registry that does not select every pair (swap_into keeps the base's
# selection where a pair cannot be proven here) is removed and said: a rung of several changes must hold all of them
swap_all() {
  local name=$1 reg=$2 base=$3 pairs=$4 why
  fresh_over $reg $base
  # shellcheck disable=SC2086 # PAIRS is a word list
  [ -f $reg ] || run swap-$name 40 bash -c 'swap_into "$@"' _ $reg $base $pairs
  # shellcheck disable=SC2086
  if [ -f $reg ] && ! why=$(python3 bench/registry_selects.py $reg $pairs 2>&1); then
    log "$name: $why; its registry removed"
    rm -f $reg $reg.base
  fi
  [ -f $reg ]
}
# s22_step STAGE: session 22's step ($S22_REG): the row-warp step with S22_PAIRS swapped in (each proven by its swap
# on this machine; their GPU tests passed in session 22) and [engine] fuse_kda_norm on. False, said, without it
s22_step() {
  rowwarp_step $1 || return 1
  fresh_over $S22_REG $RW_REG
  if [ ! -f $S22_REG ] && swap_all s22-all $S22_REG.swap $RW_REG "$S22_PAIRS"; then
    cp $S22_REG.swap $S22_REG.new && sparkops engine fuse_kda_norm=on --registry $S22_REG.new > /dev/null \
        && mv $S22_REG.new $S22_REG && echo "$RW_REG" > $S22_REG.base
  fi
  [ -f $S22_REG ] || { log "$1: no session-22 step ($S22_REG)"; return 1; }
}
# s22_rung: session 22's step as its own rung over the row-warp step (unless SUITE_TIMED names decode-s22-all: session
# 22 timed it by hand), after the captured gate, forecast from the four rungs' per-op records ($S22_FACTOR)
s22_rung() {
  timed decode-s22-all && { log "decode-s22-all: timed in an earlier session (SUITE_TIMED): the step only made"; return 0; }
  diagnose_base s22-all $RW_REG
  captured_gate s22-all $S22_REG || return 0
  [ -s $DJ/diag-decode-s22-all.json ] && run decode-s22-all 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $RW_REG --vs $S22_REG --graph A,B $GATE $FILL_LEAN \
      --changes engine,add_rmsnorm,moe_router,kda_norm,swiglu,attention --prediction $DJ/diag-decode-s22-all.json \
      --expect "$S22_FACTOR" --change "$S22_PAIRS with [engine] fuse_kda_norm: sessions 20-22's four rungs that each \
timed none, together, over $(basename $RW_REG), graph"
  return 0
}
# s23_pair NAME REG CHANGES EXPECT TEXT: rung decode-NAME, REG over session 22's step, after REG's captured gate,
# forecast on the step's one diagnosis (diag-decode-s23-nones: the same base for every rung of stage rungs23)
s23_pair() {
  local name=$1 reg=$2 changes=$3 expect=$4 text=$5
  [ -f $reg ] || { log "decode-$name: left out (no registry $reg)"; return 0; }
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-s23-nones.json ] && run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $S22_REG --vs $reg --graph A,B $GATE $FILL_LEAN --changes $changes \
      --prediction $DJ/diag-decode-s23-nones.json --expect "$expect" --change "$text, over $(basename $S22_REG), graph"
  return 0
}
# s23_step: the rungs23 registry ($S23_REG): session 22's step with S23_PDL_PAIRS swapped in by one swap ($S23_PDL_REG)
# and [engine] fuse_low_rank and side_stream on; made again when its base moved. False when it could not be made
s23_step() {
  swap_all s23-pdl $S23_PDL_REG $S22_REG "$S23_PDL_PAIRS"
  fresh_over $S23_REG $S23_PDL_REG
  if [ ! -f $S23_REG ] && [ -f $S23_PDL_REG ]; then
    cp $S23_PDL_REG $S23_REG.new && sparkops engine fuse_low_rank=on side_stream=on --registry $S23_REG.new \
        > /dev/null && mv $S23_REG.new $S23_REG && echo "$S23_PDL_REG" > $S23_REG.base
  fi
  [ -f $S23_REG ]
}
# s23_rungs: the earlier nones over session 22's step, together first (decode-s23-nones), then each alone: the PDL
# kernels by swap (S23_PDL_PAIRS), fuse_low_rank and side_stream by `sparkops engine`, after the side stream's proof
s23_rungs() {
  local t
  for t in side kda-norm; do  # the side stream's and the triggering kda_norm's GPU tests (stage rungs23 runs them first)
    if [ "$(marker $DONE/gpu-tests-$t)" != 0 ]; then
      log "decode-s23-nones: left out (the GPU tests gpu-tests-$t did not pass)"
      return 0
    fi
  done
  diagnose_base s23-nones $S22_REG
  s23_step
  engine_over $S23_LOWRANK_REG $S22_REG fuse_low_rank
  engine_over $S23_SIDE_REG $S22_REG side_stream
  s23_pair s23-nones $S23_REG engine,gated_rmsnorm,kda_norm,linear@Q4_K,moe_experts "$S23_FACTOR" "$S23_PDL_PAIRS \
with [engine] fuse_low_rank and side_stream: the earlier nones (sessions 9, 18, 19) together"
  s23_pair s23-pdl $S23_PDL_REG gated_rmsnorm,kda_norm,linear@Q4_K,moe_experts "$S23_PDL_FACTOR" \
      "$S23_PDL_PAIRS: the PDL GEMVs and experts (session 18's none) alone"
  s23_pair s23-lowrank $S23_LOWRANK_REG engine "linear@F16=$S23_LOWRANK_F16" "[engine] fuse_low_rank: f_b and g_b one \
block-diagonal linear (session 9's none) alone"
  s23_pair s23-side $S23_SIDE_REG engine "linear@F16=$S23_SIDE_F16" "[engine] side_stream: the gate GEMVs on a \
second stream (session 19's none) alone"
  # the deep attention with the empty slices skipped, after its GPU tests (their side-by-side writes the forecast)
  local factor
  factor=$(perop attndeep cupy_splitk_bf16_deep cupy_splitk_bf16_deep_active)
  proven_with_factor s23-attn-deep-active attn-deep "$factor" || return 0
  swap_all s23-attn-deep-active $S23_ATTN_REG $S22_REG attention=cupy_splitk_bf16_deep_active
  s23_pair s23-attn-deep-active $S23_ATTN_REG attention "attention=$factor" "attention=cupy_splitk_bf16_deep_active: \
the deep kernels with a short context's empty slices neither written nor read (the same bits)"
}
proof_kda_lowrank() {  # kda_lowrank_norm in triton_split and triton_split_pdl (session 24; the PDL form the same bits):
  # the contract on CUDA, the 48B's decode step against the unfused chain (f_b and g_b linears, then kda_norm), then
  # the chain, kda_norm alone, the gate linears alone and both fused forms timed side by side (its record,
  # $DJ/perop-kdalowrank-bfloat16.json, is the rung's forecast); the engine option's tests ([engine] fuse_kda_gates)
  run gpu-tests-kda-lowrank 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_triton_kda_lowrank_norm.py tests/engine/test_kda_gates_fusion.py \
      --junitxml="$R/gpu-tests-kda-lowrank.xml"
}
# rebase NAME BASE: what rung decode-NAME did on this machine belongs to the base it was done over
# ($DONE/decode-NAME.base). Over another BASE (rungs24: decode-s23-nones won in a later call than the one that
# diagnosed session 22's step for it) its diagnosis, captured gate and pair are forgotten, so that they are made again
# over BASE and the pair is forecast on BASE's own diagnosis (a row timed over the old base stays in the ledger)
rebase() {
  local name=$1 base=$2 was
  was=$(marker $DONE/decode-$name.base)
  if [ -n "$was" ] && [ "$was" != "$base" ]; then
    log "decode-$name: its base is now $(basename $base), not $(basename $was): diagnosed, gated and timed again"
    rm -f $DONE/{diagnose-decode-$name,gate-captured-$name,decode-$name}{,.code} $DONE/decode-$name.tier \
        $DJ/diag-decode-$name.json
  fi
  echo "$base" > $DONE/decode-$name.base
}
# s24_rung: [engine] fuse_kda_gates with the faster kda_lowrank_norm in its record, over the step now - the rungs23
# registry when decode-s23-nones won (on this machine or SUITE_TIMED; made by swaps where missing), else session 22's
# step: the base's own diagnosis, the swap (proven here) and the option, the captured gate, the pair at 0 and 32768,
# forecast on kda_norm from the record and on linear@F16 from the launches that go (S24_F16_OVER_*). Left out, saying
# why, without the proof, its record's factor, or the rungs23 registry a win of decode-s23-nones asks for
s24_rung() {
  local name=s24-gates base=$S22_REG f16=$S24_F16_OVER_S22 reg=$S24_REG impl factor=""
  impl=$(python3 bench/perop_factor.py "$DJ/perop-kdalowrank-bfloat16.json" --fastest triton_split triton_split_pdl \
      || true)
  [ -n "$impl" ] && factor=$(perop kdalowrank kda_norm $impl)
  proven_with_factor $name kda-lowrank "$factor" || return 0
  if timed decode-s23-nones; then
    s23_step || { log "decode-$name: left out (decode-s23-nones won; its registry $S23_REG was not made)"; return 0; }
    base=$S23_REG f16=$S24_F16_OVER_S23
  fi
  rebase $name $base
  diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ] && swap_all $name $reg.swap $base kda_lowrank_norm=$impl; then
    cp $reg.swap $reg.new && sparkops engine fuse_kda_gates=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  [ -f $reg ] || { log "decode-$name: left out (no registry $reg)"; return 0; }
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-$name.json ] && run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $base --vs $reg --graph A,B $GATE $FILL_LEAN \
      --changes engine,kda_lowrank_norm --prediction $DJ/diag-decode-$name.json \
      --expect "kda_norm=$factor,linear@F16=$f16" --change "[engine] fuse_kda_gates with kda_lowrank_norm=$impl (the \
faster fused form in its side-by-side): a KDA layer's two low-rank gate up-projections (f_b, g_b) inside its fused \
recurrence and norm, over $(basename $base), graph"
  return 0
}
proof_conv_pdl() {  # short_conv=triton_pdl (session 25): the contract on CUDA for both forms, the PDL form's bits
  # against the plain one replayed from CUDA graphs after a writer of x, both timed at the fused conv's one-token shape
  # (its record, $DJ/perop-convpdl-bfloat16.json, is the rung's forecast)
  run gpu-tests-conv-pdl 90 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_triton_short_conv.py --junitxml="$R/gpu-tests-conv-pdl.xml"
}
# cupy_proof NAME LIMIT K: the CuPy kernels' GPU tests selected by K (-k) in test_cupy_pdl.py and test_cupy_timing.py,
# as step NAME within LIMIT seconds, their side-by-side records under $DJ (SPARKOPS_PEROP_DIR), the JUnit XML in $R
cupy_proof() {
  run $1 $2 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k $3 \
      tests/backends/test_cupy_pdl.py tests/backends/test_cupy_timing.py --junitxml="$R/$1.xml"
}
proof_exp_shared() {  # moe_experts=cupy_rowwarp_pdl_shared (session 26): cupy_rowwarp's bits eagerly and from a graph
  # of three layers, an out-of-range id's NaN, then the norm-router-experts chain timed under cupy_rowwarp_pdl and
  # this form (its record, $DJ/perop-expshared-bfloat16.json, is the rung's forecast)
  cupy_proof gpu-tests-exp-shared 120 shared_first
}
proof_exp_split() {  # moe_experts=cupy_rowwarp_pdl_split (written in session 26): close to cupy_rowwarp, its own bits
  # replayed from a graph of three layers, an empty quarter, an out-of-range id's NaN, then the chain timed (-k
  # split_down; its record $DJ/perop-expsplit-bfloat16.json)
  cupy_proof gpu-tests-exp-split 120 split_down
}
proof_exp_q8() {  # moe_experts=cupy_rowwarp_pdl_q8 and _q8_split (written in session 26): close to the torch experts
  # in three dtypes, their own bits replayed from a graph of three layers, an out-of-range id's NaN, then the chain
  # timed beside the split (-k q8_gate_up; its record $DJ/perop-expq8-bfloat16.json)
  cupy_proof gpu-tests-exp-q8 120 q8_gate_up
}
proof_exp_q8h() {  # moe_experts=cupy_rowwarp_pdl_q8_hidden (written in session 27): close to the torch experts in
  # three dtypes, its own bits when replayed after the PDL norm and router, NaN for a bad id or a non-finite x, timed
  # beside the Q8 gate/up alone (-k q8_hidden; its record $DJ/perop-expq8h-bfloat16.json)
  cupy_proof gpu-tests-exp-q8h 120 q8_hidden
}
proof_linear_q8() {  # linear@Q4_K=cupy_rowwarp_pdl_q8 (written in session 27): close to the float64 product at the
  # 48B's and odd shapes in three dtypes, its own bits, a chain of 8 replayed from a graph and after the PDL norm, NaN
  # for a non-finite x, timed beside the PDL GEMV (-k q8_gemv; its record $DJ/perop-rowq8-bfloat16.json)
  cupy_proof gpu-tests-linear-q8 150 q8_gemv
}
proof_exp_q8p() {  # moe_experts=cupy_rowwarp_pdl_q8_pipe (written after session 28): the Q8 hidden pair's bits in
  # three dtypes and both stage forms, its own grid and 7 blocks, eagerly and replayed after the PDL norm and router;
  # small shapes; NaN for a bad id or a non-finite x; timed beside the Q8 hidden pair (-k q8_pipe; its record
  # $DJ/perop-expq8p-bfloat16.json)
  cupy_proof gpu-tests-exp-q8p 150 q8_pipe
}
proof_exp_q8w() {  # moe_experts=cupy_rowwarp_pdl_q8_pairs (written after session 28): close to the torch experts in
  # three dtypes and its own bits replayed after the PDL norm and router, within float rounding of the Q8 hidden pair
  # at three widths, NaN for a bad id or a non-finite x, timed beside the Q8 hidden pair (-k q8_pairs; its record
  # $DJ/perop-expq8w-bfloat16.json)
  cupy_proof gpu-tests-exp-q8w 150 q8_pairs
}
proof_exp_q8c() {  # moe_experts=cupy_rowwarp_pdl_q8_hidden_cp and _q8_pairs_cp (written after session 29): their
  # warp-down pairs' bits in three dtypes, every form of commit groups and three shapes, replayed after the PDL norm and
  # router, close to the torch experts, NaN for a bad id or a non-finite x, the shared-memory policy; timed beside the
  # Q8 hidden pair and the pairs pair (-k copy_down; its record $DJ/perop-expq8c-bfloat16.json)
  cupy_proof gpu-tests-exp-q8c 150 copy_down
}
proof_exp_q8l() {  # moe_experts=cupy_rowwarp_pdl_q8_hidden_ld and _q8_pairs_ld (written after session 30): their
  # warp-down pairs' bits in three dtypes, both forms and four shapes (one past DOWN_LD_MAX_K), replayed after the PDL
  # norm and router, close to the torch experts, NaN for a bad id or a non-finite x; timed beside the Q8 hidden pair
  # and the pairs pair (-k down_loads; its record $DJ/perop-expq8l-bfloat16.json)
  cupy_proof gpu-tests-exp-q8l 150 down_loads
}
# proof_stack34: rungs34's two GPU tests (the copy downs' with the pairs columns, the Q8 GEMVs' with their record)
proof_stack34() {
  proof_exp_q8c
  proof_linear_q8
}
proof_x16() {  # linear@Q6_K=cupy_x16_pdl (written in session 29): close to the float64 product at the lm_head's and
  # partial shapes in three dtypes, every form's bits alike, replayed from a graph with new activations, NaN for a
  # non-finite x, its policy; timed beside cupy_float and cupy_dp4a at the lm_head (-k x16; its record
  # $DJ/perop-x16-bfloat16.json)
  run gpu-tests-x16 200 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k x16 \
      tests/backends/test_cupy_x16.py tests/backends/test_cupy_timing.py --junitxml="$R/gpu-tests-x16.xml"
}
proof_exp_wide() {  # moe_experts=cupy_rowwarp_pdl_wide (written in session 26): the same three tests for the wide down
  # (-k wide_down), its record $DJ/perop-expwide-bfloat16.json
  cupy_proof gpu-tests-exp-wide 120 wide_down
}
# experts_rung NAME REG IMPL STEM TESTS TEXT [REF]: rung decode-NAME, moe_experts=IMPL over the step now (session 23's,
# or a newer rung that won), after gpu-tests-TESTS passed and gave a factor from perop-STEM-bfloat16.json (IMPL against
# REF, cupy_rowwarp_pdl unless named: the base's experts) and REG's captured gate; the base's diagnosis is rungs25's
# when the base is that stage's (the same registry on this machine), else its own
experts_rung() {
  local name=$1 reg=$2 impl=$3 stem=$4 tests=$5 text=$6 ref=${7:-cupy_rowwarp_pdl} base fac
  base=$(now_reg decode-$name) || return 0
  fac=$(perop $stem $ref $impl)
  proven_with_factor $name $tests "$fac" || return 0
  rebase $name $base
  if [ "$base" = "$S23_REG" ] && [ -s $DJ/diag-decode-s25-base.json ] && [ ! -s $DJ/diag-decode-$name.json ]; then
    cp $DJ/diag-decode-s25-base.json $DJ/diag-decode-$name.json
    log "decode-$name: its base's diagnosis is diag-decode-s25-base's ($(basename $base) on this machine)"
  fi
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  if [ "$base" = "$S23_REG" ] && [ -s $DJ/diag-decode-$name.json ] && [ ! -s $DJ/diag-decode-s25-base.json ]; then
    cp $DJ/diag-decode-$name.json $DJ/diag-decode-s25-base.json  # rungs25's base is this one: diagnosed once
    log "decode-$name: its diagnosis of $(basename $base) is rungs25's base's too (diag-decode-s25-base.json)"
  fi
  fresh_over $reg $base
  [ -f $reg ] || run swap-$name 30 bash -c 'swap_into "$@"' _ $reg $base moe_experts=$impl
  [ -f $reg ] && python3 bench/registry_selects.py $reg moe_experts=$impl > /dev/null \
      || { log "decode-$name: left out (its registry does not select moe_experts=$impl)"; return 0; }
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes moe_experts --prediction $DJ/diag-decode-$name.json \
      --expect "moe_experts=$fac" --change "moe_experts=$impl: $text, over $(basename $base), graph"
  return 0
}
# s26_rung / s26w_rung: decode-s26-exp-shared and decode-s26-exp-wide (experts_rung)
s26_rung() {
  experts_rung s26-exp-shared $S26_EXPSH_REG cupy_rowwarp_pdl_shared expshared exp-shared "the shared expert's \
gate/up rows requested before the wait for the router, its blocks first (the same bits as cupy_rowwarp)"
}
s27_rung() {
  experts_rung s27-exp-split $S27_EXPSPLIT_REG cupy_rowwarp_pdl_split expsplit exp-split "down as four warps an \
output, each a quarter of its super-blocks requested before the wait, the four sums added in warp order (the \
tolerance row)"
}
# s27q_rung: the Q8 gate/up over the step now: with the split down when decode-s27-exp-split won (the step's experts
# are then the split pair, and gate/up is all the rung changes), else with the PDL warp down
s27q_rung() {
  if timed decode-s27-exp-split; then
    experts_rung s27-exp-q8 $S27_EXPQ8_REG cupy_rowwarp_pdl_q8_split expq8 exp-q8 "gate/up on Q8 activations and \
__dp4a (the act_q8 row), with the split down of the step" cupy_rowwarp_pdl_split
  else
    experts_rung s27-exp-q8 $S27_EXPQ8_REG cupy_rowwarp_pdl_q8 expq8 exp-q8 "gate/up on Q8 activations and __dp4a \
(the act_q8 row)"
  fi
}
# rung_parts STAGE: the proof and the rung function of stages rungs26 .. rungs48 (their proofsN run the proof alone)
rung_parts() {
  case $1 in
    rungs26) echo proof_exp_shared s26_rung ;;
    rungs26w) echo proof_exp_wide s26w_rung ;;
    rungs27) echo proof_exp_split s27_rung ;;
    rungs27q) echo proof_exp_q8 s27q_rung ;;
    rungs28) echo proof_exp_q8h s28_rung ;;
    rungs29) echo proof_linear_q8 s29_rung ;;
    rungs30) echo proof_exp_q8p s30_rung ;;
    rungs31) echo proof_exp_q8w s31_rung ;;
    rungs32) echo proof_x16 s32_rung ;;
    rungs33) echo proof_exp_q8c s33_rung ;;
    rungs34) echo proof_stack34 s34_rung ;;
    rungs35) echo proof_exp_q8l s35_rung ;;
    rungs36) echo proof_norm_router s36_rung ;;
    rungs37) echo proof_router_sorted s37_rung ;;
    rungs38) echo proof_q8_shortplain s38_rung ;;
    rungs39) echo proof_q8_tall s39_rung ;;
    rungs40) echo proof_conv_kda s40_rung ;;
    rungs41) echo proof_shared_side s41_rung ;;
    rungs42) echo proof_gates_conv s42_rung ;;
    rungs43) echo proof_norm_wait s43_rung ;;
    rungs44) echo proof_attn_pdl s44_rung ;;
    rungs45) echo proof_pdl_stack s45_rung ;;
    rungs46) echo proof_moe_norm s46_rung ;;
    rungs47) echo proof_oproj_norm s47_rung ;;
    rungs48) echo proof_norm_folds s48_rung ;;
    rungs49) echo proof_nones49 s49_rung ;;
    rungs50) echo proof_exp_q8l s50_rung ;;
    rungs51) echo proof_xpf s51_rung ;;
    rungs52) echo proof_xr52 s52_rung ;;
    rungs53) echo proof_exp_hs s53_rung ;;
    rungs54) echo proof_exp_l2pf s54_rung ;;
    rungs55) echo proof_stack55 s55_rung ;;
    rungs56) echo proof_router_merge s56_rung ;;
    rungs57) echo proof_gu_grouped s57_rung ;;
    rungs58) echo proof_gu_streamed s58_rung ;;
  esac
}
# linear_rung NAME REG OP@TYPE IMPL STEM REF TESTS TEXT: rung decode-NAME, OP@TYPE=IMPL over the step now, after
# gpu-tests-TESTS passed and gave a factor from perop-STEM-bfloat16.json (IMPL against REF, the base's selection for
# that type) and REG's captured gate; the base diagnosed on this machine
linear_rung() {
  local name=$1 reg=$2 changes=$3 impl=$3=$4 stem=$5 ref=$6 tests=$7 text=$8 base fac
  base=$(now_reg decode-$name) || return 0
  fac=$(perop $stem $ref ${impl#*=})
  proven_with_factor $name $tests "$fac" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  swap_one $name $reg $base $impl || return 0
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes $changes --prediction $DJ/diag-decode-$name.json \
      --expect "$changes=$fac" --change "$impl: $text, over $(basename $base), graph"
  return 0
}
# swap_one NAME REG BASE OP=IMPL: REG made over BASE by the one swap (kept if made over BASE already); false, said,
# unless it selects IMPL
swap_one() {
  local name=$1 reg=$2 base=$3 impl=$4
  fresh_over $reg $base
  [ -f $reg ] || run swap-$name 30 bash -c 'swap_into "$@"' _ $reg $base $impl
  [ -f $reg ] && python3 bench/registry_selects.py $reg $impl > /dev/null \
      || { log "decode-$name: left out (its registry does not select $impl)"; return 1; }
}
# s29_rung: linear@Q4_K=cupy_rowwarp_pdl_q8 over the step now (rungs28's when SUITE_TIMED names it), forecast from
# perop-rowq8-bfloat16.json (cupy_rowwarp_pdl, the step's Q4_K GEMVs, against it)
s29_rung() {
  linear_rung s29-linear-q8 $S29_LINQ8_REG linear@Q4_K cupy_rowwarp_pdl_q8 rowq8 cupy_rowwarp_pdl linear-q8 \
      "the Q4_K GEMVs on Q8 activations and __dp4a (the act_q8 row)"
}
# s32_rung: linear@Q6_K=cupy_x16_pdl (the lm_head) over the step now, forecast from perop-x16-bfloat16.json
# (cupy_float, the step's lm_head, against it)
s32_rung() {
  linear_rung s32-lmhead-x16 $S32_X16_REG linear@Q6_K cupy_x16_pdl x16 cupy_float x16 \
      "the lm_head's Q6_K GEMV on 16-bit activations in two int8 planes and __dp4a (the bf16 row)"
}
# s28_rung: the Q8 gate/up writing the hidden vector in Q8, and down on it by __dp4a, over the step now
s28_rung() {
  experts_rung s28-exp-q8h $S28_EXPQ8H_REG cupy_rowwarp_pdl_q8_hidden expq8h exp-q8h "the Q8 gate/up writing the \
hidden vector in Q8 (groups of 8), down on it by __dp4a (the act_q8 row)"
}
# s30_rung: the Q8 hidden pair with its gate/up pipelined, over the step now (rungs28's when SUITE_TIMED names it:
# its experts are the Q8 hidden pair, so the forecast is that column against this one)
s30_rung() {
  experts_rung s30-exp-q8p $S30_EXPQ8P_REG cupy_rowwarp_pdl_q8_pipe expq8p exp-q8p "the Q8 hidden pair with its \
gate/up pipelined through stages of shared memory, a few blocks an SM (the same bits as cupy_rowwarp_pdl_q8_hidden)" \
      cupy_rowwarp_pdl_q8_hidden
}
# s31_rung: the Q8 hidden pair with a lane a whole sub-block pair in gate/up's dot loop, over the step now (its
# forecast against the step's experts, as s30_rung's)
s31_rung() {
  experts_rung s31-exp-q8w $S31_EXPQ8W_REG cupy_rowwarp_pdl_q8_pairs expq8w exp-q8w "the Q8 hidden pair with a lane a \
whole sub-block pair in gate/up's dot loop, the scales applied to integer sums, x staged padded (PAIRS_X, 80 bytes a \
64 codes: no bank conflicts; the act_q8 row)" cupy_rowwarp_pdl_q8_hidden
}
# s33_rung: the Q8 hidden pair with down in a copy form, over the step now (its forecast against the step's experts)
s33_rung() {
  experts_rung s33-exp-q8c $S33_EXPQ8C_REG cupy_rowwarp_pdl_q8_hidden_cp expq8c exp-q8c "the Q8 hidden pair with \
down in a copy form: each warp's rows copied into shared memory before the PDL wait, in commit groups dotted as they \
land (DOWN_CP_GROUPS; the same bits as cupy_rowwarp_pdl_q8_hidden)" cupy_rowwarp_pdl_q8_hidden
}
# s34_rung: session 28's and 29's nones stacked over the step now, one rung: the pairs gate/up (with the copy down
# when decode-s33-exp-q8c won: the step's experts are then cupy_rowwarp_pdl_q8_hidden_cp) and the Q4_K GEMVs on Q8
# activations. Forecast on moe_experts from perop-expq8c (the step's experts' column against the pairs pair's) and on
# linear@Q4_K from perop-rowq8 (cupy_rowwarp_pdl's against cupy_rowwarp_pdl_q8's)
s34_rung() {
  local name=s34-stack reg=$S34_STACK_REG base impl=cupy_rowwarp_pdl_q8_pairs ref=cupy_rowwarp_pdl_q8_hidden fe fl
  if timed decode-s33-exp-q8c; then impl=cupy_rowwarp_pdl_q8_pairs_cp; ref=cupy_rowwarp_pdl_q8_hidden_cp; fi
  base=$(now_reg decode-$name) || return 0
  fe=$(perop expq8c $ref $impl)
  fl=$(perop rowq8 cupy_rowwarp_pdl cupy_rowwarp_pdl_q8)
  proven_with_factor $name exp-q8c "$fe" || return 0
  proven_with_factor $name linear-q8 "$fl" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  swap_all $name $reg $base "moe_experts=$impl linear@Q4_K=cupy_rowwarp_pdl_q8" \
      || { log "decode-$name: left out (its registry was not made)"; return 0; }
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes moe_experts,linear@Q4_K --prediction $DJ/diag-decode-$name.json \
      --expect "moe_experts=$fe,linear@Q4_K=$fl" --change "moe_experts=$impl linear@Q4_K=cupy_rowwarp_pdl_q8: the \
nones of sessions 28 and 29 stacked (the pairs gate/up, x padded; the Q4_K GEMVs on Q8 activations and __dp4a; both \
the act_q8 row), over $(basename $base), graph"
  return 0
}
# s35_rung: the Q8 down's loads requested earlier, over the step now: the pairs pair's form when decode-s34-stack won
# (the step's experts are then cupy_rowwarp_pdl_q8_pairs), else the Q8 hidden pair's; forecast from perop-expq8l (the
# step's experts' column against the form's)
s35_rung() {
  if timed decode-s34-stack; then
    experts_rung s35-exp-q8l $S35_EXPQ8L_REG cupy_rowwarp_pdl_q8_pairs_ld expq8l exp-q8l "the pairs pair with its \
down's expert ids and routing weights read once a warp, a lane a slot, not a round trip a round (DOWN_LD_FORM; the \
same bits as cupy_rowwarp_pdl_q8_pairs)" cupy_rowwarp_pdl_q8_pairs
  else
    experts_rung s35-exp-q8l $S35_EXPQ8L_REG cupy_rowwarp_pdl_q8_hidden_ld expq8l exp-q8l "the Q8 hidden pair with \
its down's expert ids and routing weights read once a warp, a lane a slot, not a round trip a round (DOWN_LD_FORM; \
the same bits as cupy_rowwarp_pdl_q8_hidden)" cupy_rowwarp_pdl_q8_hidden
  fi
}
# proof_norm_router: add_rmsnorm_router=cupy_rowwarp_pdl (session 31): the fused kernel against the reference at the
# 48B's and limit shapes in three dtypes, every output written, its counters at zero, replayed after PDL producers,
# NaN carried, its policy; the engine option on the captured step; then the norm-and-router chain and the fused
# kernel timed side by side (-k norm_router in the timing file; its record $DJ/perop-normrouter-bfloat16.json)
proof_norm_router() {
  run gpu-tests-norm-router 180 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_cupy_add_rmsnorm_router.py tests/engine/test_router_norm_fusion.py \
      "tests/backends/test_cupy_timing.py::test_norm_router_fused_side_by_side" --junitxml="$R/gpu-tests-norm-router.xml"
}
# s36_rung: [engine] fuse_router_norm with add_rmsnorm_router=cupy_rowwarp_pdl over the step now (swapped in, proven,
# then the option), the captured gate, then the pair forecast on moe_router from the side-by-side's record
s36_rung() {
  local name=s36-norm-router reg=$S36_NORMROUTER_REG base fac
  base=$(now_reg decode-$name) || return 0
  fac=$(perop normrouter chain cupy_rowwarp_pdl)
  proven_with_factor $name norm-router "$fac" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ]; then
    run swap-$name 30 bash -c 'swap_into "$@"' _ $reg.swap $base add_rmsnorm_router=cupy_rowwarp_pdl
    [ -f $reg.swap ] && cp $reg.swap $reg.new && sparkops engine fuse_router_norm=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  [ -f $reg ] && python3 bench/registry_selects.py $reg add_rmsnorm_router=cupy_rowwarp_pdl > /dev/null \
      || { log "decode-$name: left out (its registry does not select add_rmsnorm_router=cupy_rowwarp_pdl)"; return 0; }
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-$name.json ] && run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $base --vs $reg --graph A,B $GATE $FILL_LEAN \
      --changes engine,add_rmsnorm_router --prediction $DJ/diag-decode-$name.json --expect "moe_router=$fac" \
      --change "[engine] fuse_router_norm with add_rmsnorm_router=cupy_rowwarp_pdl: a MoE layer's residual add, FFN \
norm and router in one PDL launch (every warp norms the row itself; the norm's launch leaves the chain), over \
$(basename $base), graph"
  return 0
}
# proof_router_sorted: moe_router=cupy_rowwarp_pdl_sorted (session 32): cupy_rowwarp's bits at the 48B's and the limit
# shapes in three dtypes, the ties, a replayed graph, a NaN token; then the step's norm-and-router pair timed with each
# router (-k sorted; its record $DJ/perop-routersort-bfloat16.json)
proof_router_sorted() {
  run gpu-tests-router-sorted 120 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k sorted tests/backends/test_cupy_moe_router.py tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-router-sorted.xml"
}
# s37_rung: moe_router=cupy_rowwarp_pdl_sorted over the step now, forecast from perop-routersort (the step's
# cupy_rowwarp_pdl column against the sorted one)
s37_rung() {
  linear_rung s37-router-sorted $S37_ROUTSORT_REG moe_router cupy_rowwarp_pdl_sorted routersort cupy_rowwarp_pdl \
      router-sorted "the router's routing tail shortened: the biases in shared memory before the wait, each routing \
lane's experts sorted once, a pick one warp reduction and a ballot (the same bits as cupy_rowwarp)"
}
# proof_q8_shortplain: linear@Q4_K=cupy_rowwarp_pdl_q8_shortplain (session 32): its chain of PDL tall and plain short
# Q8 GEMVs replayed from a graph, bitwise the PDL form's; then KDA's gated norm and the o_proj-sized GEMV timed with
# each (-k shortplain; its record $DJ/perop-q8plain-bfloat16.json)
proof_q8_shortplain() {
  run gpu-tests-q8-shortplain 120 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k shortplain tests/backends/test_cupy_pdl.py tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-q8-shortplain.xml"
}
# s38_rung: the short Q4_K GEMVs (o_proj) launched plainly over the step now, when its Q4_K GEMVs are the Q8 ones
# (cupy_rowwarp_pdl_q8: the stack's, rungs34): one change, not two. Forecast from perop-q8plain (the PDL form's column
# over the plain one's)
s38_rung() {
  local base
  base=$(now_reg decode-s38-q8-shortplain) || return 0
  if ! python3 bench/registry_selects.py "$base" linear@Q4_K=cupy_rowwarp_pdl_q8 > /dev/null 2>&1; then
    log "decode-s38-q8-shortplain: left out (the step now, $(basename "$base"), does not run the Q8 GEMVs: rungs34 first)"
    return 0
  fi
  linear_rung s38-q8-shortplain $S38_SHORTPLAIN_REG linear@Q4_K cupy_rowwarp_pdl_q8_shortplain q8plain \
      cupy_rowwarp_pdl_q8 q8-shortplain "the short Q4_K GEMVs (the o_proj shapes) launched after the kernel before \
ends, the tall ones still with PDL (the same bits as cupy_rowwarp_pdl_q8)"
}
# proof_q8_tall: linear@Q4_K=cupy_rowwarp_pdl_q8_tall (session 32): its chain (Q8 tall, float short, all PDL)
# replayed from a graph, each output bitwise its form's; then a token's Q4_K GEMVs timed under the step's forms and it
# (-k "q8_tall or q8_gemv_side_by_side"; its column in $DJ/perop-rowq8-bfloat16.json)
proof_q8_tall() {
  run gpu-tests-q8-tall 120 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k "q8_tall or q8_gemv_side_by_side" tests/backends/test_cupy_pdl.py tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-q8-tall.xml"
}
# s39_rung: the Q8 GEMV for the tall weights and the float warp form for the short ones, over the step now, forecast
# from perop-rowq8 against the base's own Q4_K GEMVs (cupy_rowwarp_pdl in the x16 step, cupy_rowwarp_pdl_q8 in the
# stack's)
s39_rung() {
  local base ref=cupy_rowwarp_pdl
  base=$(now_reg decode-s39-q8-tall) || return 0
  python3 bench/registry_selects.py "$base" linear@Q4_K=cupy_rowwarp_pdl_q8 > /dev/null 2>&1 && ref=cupy_rowwarp_pdl_q8
  linear_rung s39-q8-tall $S39_Q8TALL_REG linear@Q4_K cupy_rowwarp_pdl_q8_tall rowq8 $ref q8-tall "the Q8 GEMV \
for the tall weights, the float warp form for the short ones (o_proj), all with PDL: each where the step's timeline \
put it ahead"
}
# proof_conv_kda: short_conv_kda_norm=triton_split / triton_split_pdl (session 33): the fused conv, recurrence and
# norm against the reference; the engine option on the captured step; then the 48B's decode step against the unfused
# chain the step runs (short_conv=triton then kda_norm=triton_split_pdl) with the chain and both fused forms timed side by side
# (test_gpu_48b_decode_against_the_unfused_chain_and_timed; its record $DJ/perop-convkda-bfloat16.json)
proof_conv_kda() {
  run gpu-tests-conv-kda 180 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_triton_short_conv_kda_norm.py tests/engine/test_conv_kda_fusion.py \
      --junitxml="$R/gpu-tests-conv-kda.xml"
}
# s40_rung: [engine] fuse_conv_kda with short_conv_kda_norm=triton_split_pdl over the step now (swapped in, proven,
# then the option), the captured gate, then the pair forecast from the side-by-side's record. The fused op replaces
# both short_conv and kda_norm, and the record's factor is the pair's time (the chain) over the fused op's, so
# --expect gives that one factor to each of the two: bench's Amdahl (bench/prediction.py amdahl) sums
# t_op x (1 - 1/FACTOR) over the ops named, which with one FACTOR for both is (t_short_conv + t_kda_norm) x
# (1 - 1/FACTOR), the pair's sum forecast as a whole. One op alone (kda_norm=FACTOR) would apply the pair's factor to
# half its time; the diagnosis times the two under these names (short_conv, kda_norm: rungs25's and rungs24's).
# The record's chain column is short_conv=triton then kda_norm=triton_split_pdl (S40_CHAIN), what session 23's step and
# those after it select (the PDL conv, 5.16 us a call alone against triton's 2.15 in session 25, was never a rung); a
# base that selects another pair is said in the log: the forecast then rests on a chain the step does not run
S40_CHAIN="short_conv=triton kda_norm=triton_split_pdl"
s40_rung() {
  local name=s40-conv-kda reg=$S40_CONVKDA_REG base fac
  base=$(now_reg decode-$name) || return 0
  fac=$(perop convkda chain triton_split_pdl)
  proven_with_factor $name conv-kda "$fac" || return 0
  # shellcheck disable=SC2086 # S40_CHAIN is a word list
  python3 bench/registry_selects.py "$base" $S40_CHAIN > /dev/null 2>&1 || log "decode-$name: the forecast's chain \
($S40_CHAIN, perop-convkda's chain column) is not what $(basename "$base") selects: x$fac on short_conv and kda_norm \
is the record's, not the step's"
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ]; then
    run swap-$name 30 bash -c 'swap_into "$@"' _ $reg.swap $base short_conv_kda_norm=triton_split_pdl
    [ -f $reg.swap ] && cp $reg.swap $reg.new && sparkops engine fuse_conv_kda=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  [ -f $reg ] && python3 bench/registry_selects.py $reg short_conv_kda_norm=triton_split_pdl > /dev/null \
      || { log "decode-$name: left out (its registry does not select short_conv_kda_norm=triton_split_pdl)"; return 0; }
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-$name.json ] && run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $base --vs $reg --graph A,B $GATE $FILL_LEAN \
      --changes engine,short_conv_kda_norm --prediction $DJ/diag-decode-$name.json \
      --expect "short_conv=$fac,kda_norm=$fac" \
      --change "[engine] fuse_conv_kda with short_conv_kda_norm=triton_split_pdl: a KDA layer's short conv, recurrence \
and output norm in one PDL launch (the conv's q/k/v never leave the recurrence's programs; the conv's launch leaves \
the chain), over $(basename $base), graph"
  return 0
}
proof_shared_side() {  # [engine] shared_expert_side's GPU tests: the shared expert's launches on the side stream,
  # the captured step replaying the eager bits, the logits within a rounding of the one-stream forward, the step's
  # experts at the 48B's shape without the shared expert
  run gpu-tests-shared-side 180 python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/engine/test_shared_expert_side.py --junitxml="$R/gpu-tests-shared-side.xml"
}
# forecast NAME WHAT-IF...: $DJ/forecast-NAME.json, critical_path.py's forecast of the rung on FORECAST_TIMELINE (the
# bench row keeps it: --forecast); false, said, when it cannot be made (pure Python on a committed file: a bug here,
# and the rung is left out rather than timed without its forecast)
forecast() {
  local name=$1
  shift
  python3 bench/probes/critical_path.py $FORECAST_TIMELINE --json "$@" > $DJ/forecast-$name.json.new 2>> $R/suite.err \
      && mv $DJ/forecast-$name.json.new $DJ/forecast-$name.json \
      || { log "decode-$name: left out (no critical-path forecast: $*)"; rm -f $DJ/forecast-$name.json.new; return 1; }
}
# s41_rung: [engine] shared_expert_side over the step now (side_stream set too, which the step has had since session
# 23), the captured gate, then the pair forecast as moe_experts x1.125: the routed kernels do 8 of 9 experts' rows,
# and the shared expert's 4 launches a MoE layer run off the critical path (if they fit beside the router and gate/up)
S41_FACTOR=1.125
s41_rung() {
  local name=s41-shared-side reg=$S41_SHAREDSIDE_REG base
  base=$(now_reg decode-$name) || return 0
  proven_with_factor $name shared-side $S41_FACTOR || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ] && [ -f $base ]; then
    cp $base $reg.new && sparkops engine side_stream=on shared_expert_side=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  [ -f $reg ] || { log "decode-$name: left out (its registry was not made)"; return 0; }
  captured_gate $name $reg || return 0
  forecast $name --scale moe_q4_k_gateup=$S41_FACTOR --scale moe_q4_k_down=$S41_FACTOR || return 0
  [ -s $DJ/diag-decode-$name.json ] && run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $base --vs $reg --graph A,B $GATE $FILL_LEAN --changes engine \
      --prediction $DJ/diag-decode-$name.json --expect "moe_experts=$S41_FACTOR" --forecast $DJ/forecast-$name.json \
      --change "[engine] shared_expert_side: a MoE layer's shared expert as a dense SwiGLU FFN on the side stream \
beside the router and the routed experts (moe_experts runs the routed rows alone), over $(basename $base), graph"
  return 0
}
proof_gates_conv() {  # [engine] gates_first's GPU tests, then the fused conv's and its engine option's (proof_conv_kda:
  # they write perop-convkda, the rung's per-op factor)
  run gpu-tests-gates-first 120 python3 -m pytest -q -rP -m gpu -p no:cacheprovider tests/engine/test_gates_first.py \
      --junitxml="$R/gpu-tests-gates-first.xml"
  proof_conv_kda
}
# s42_rung: short_conv_kda_norm=triton_split_pdl swapped over the step now, then [engine] side_stream, gates_first and
# fuse_conv_kda on, the captured gate, and one pair: --expect from perop-convkda on short_conv and kda_norm (as rungs40:
# Amdahl, which does not see the side stream) and --forecast from critical_path.py (which does)
S42_FUSED_TAIL=7
s42_rung() {
  local name=s42-gates-conv reg=$S42_GATESCONV_REG base fac
  base=$(now_reg decode-$name) || return 0
  [ "$(marker $DONE/gpu-tests-gates-first)" = 0 ] \
      || { log "decode-$name: left out (gates_first's GPU tests failed)"; return 0; }
  fac=$(perop convkda chain triton_split_pdl)
  proven_with_factor $name conv-kda "$fac" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ]; then
    run swap-$name 30 bash -c 'swap_into "$@"' _ $reg.swap $base short_conv_kda_norm=triton_split_pdl
    [ -f $reg.swap ] && cp $reg.swap $reg.new \
        && sparkops engine side_stream=on gates_first=on fuse_conv_kda=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  [ -f $reg ] && python3 bench/registry_selects.py $reg short_conv_kda_norm=triton_split_pdl > /dev/null \
      || { log "decode-$name: left out (its registry does not select short_conv_kda_norm=triton_split_pdl)"; return 0; }
  captured_gate $name $reg || return 0
  forecast $name --shift 'linear_q4_k_rowq8pdl_bf16>_short_conv_kernel=-2' \
      --tail '_gemv_kernel<_add_rmsnorm_kernel=2' --tail '_gemv_kernel<_rmsnorm_kernel=2' \
      --remove _short_conv_kernel --tail _kda_recurrent_kernel=$S42_FUSED_TAIL || return 0
  [ -s $DJ/diag-decode-$name.json ] && run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $base --vs $reg --graph A,B $GATE $FILL_LEAN \
      --changes engine,short_conv_kda_norm --prediction $DJ/diag-decode-$name.json \
      --expect "short_conv=$fac,kda_norm=$fac" --forecast $DJ/forecast-$name.json \
      --change "[engine] gates_first with fuse_conv_kda (short_conv_kda_norm=triton_split_pdl): a KDA layer's gate-input \
GEMV first on the main line, the short conv inside the recurrence's kernel, over $(basename $base), graph"
  return 0
}
# proof_norm_wait: add_rmsnorm=triton_pdl_wait (session 35): its bits against "triton" eagerly and in a captured chain
# after the step's PDL o_proj GEMV, then the o_proj-and-norm pair timed under the step's norm and it, and the GEMV
# alone (-k "dependent_form or norm_wait"; its record $DJ/perop-normwait-bfloat16.json)
proof_norm_wait() {
  run gpu-tests-norm-wait 120 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k "dependent_form or norm_wait" tests/backends/test_triton_add_rmsnorm.py tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-norm-wait.xml"
}
# perop_minus STEM BEFORE AFTER MINUS: the factor of an op timed inside a chain, from perop-STEM-bfloat16.json (BEFORE's
# column less MINUS's over AFTER's less MINUS's: perop_factor.py --minus); empty, the reason in suite.err, without one
perop_minus() {
  python3 bench/perop_factor.py "$DJ/perop-$1-bfloat16.json" "$2" "$3" --minus "$4" 2>> $R/suite.err || true
}
# perop_own STEM BEFORE AFTER MINUS NAME: perop_minus's factor; where the record's MINUS column is not below both
# BEFORE's and AFTER's (the op's own time in the chain comes out negative: GPU session 36's H100 record of the PDL norm
# had the o_proj alone at 411.8 us a token, the pair with the dependent norm at 387.9), BEFORE over AFTER, the pair's
# factor, said in the log of rung decode-NAME; empty when neither is there
perop_own() {
  local f
  f=$(perop_minus "$1" "$2" "$3" "$4")
  if [ -z "$f" ]; then
    f=$(perop "$1" "$2" "$3")
    [ -n "$f" ] && log "decode-$5: perop-$1's \"$4\" is not below both columns (the op's own time in the chain is \
not positive): its --expect is the pair's factor, x$f" >&2
  fi
  echo "$f"
}
# chain_rung NAME REG OP BEFORE AFTER STEM MINUS TESTS KERNELS TEXT: rung decode-NAME, OP=AFTER over the step now (which
# selects OP=BEFORE, or is said not to), after gpu-tests-TESTS passed and perop-STEM's chain gave a factor (perop_minus),
# REG's captured gate, then one pair: --expect OP=factor, --forecast from critical_path.py with that factor on the
# timeline kernels named in KERNELS (a word list of name prefixes)
chain_rung() {
  local name=$1 reg=$2 op=$3 before=$4 after=$5 stem=$6 minus=$7 tests=$8 kernels=$9 text=${10} base fac k
  local scales=()
  base=$(now_reg decode-$name) || return 0
  fac=$(perop_own $stem $before $after "$minus" $name)
  proven_with_factor $name $tests "$fac" || return 0
  python3 bench/registry_selects.py "$base" $op=$before > /dev/null 2>&1 || log "decode-$name: the record's before \
column ($op=$before) is not what $(basename "$base") selects: x$fac is the record's, not the step's"
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  fresh_over $reg $base
  [ -f $reg ] || run swap-$name 30 bash -c 'swap_into "$@"' _ $reg $base $op=$after
  [ -f $reg ] && python3 bench/registry_selects.py $reg $op=$after > /dev/null \
      || { log "decode-$name: left out (its registry does not select $op=$after)"; return 0; }
  captured_gate $name $reg || return 0
  for k in $kernels; do scales+=(--scale "$k=$fac"); done
  forecast $name "${scales[@]}" || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes $op --prediction $DJ/diag-decode-$name.json \
      --expect "$op=$fac" --forecast $DJ/forecast-$name.json --change "$op=$after: $text, over $(basename $base), graph"
  return 0
}
# s43_rung: add_rmsnorm=triton_pdl_wait over the step now, --expect from perop-normwait (the step's norm's own time in
# the chain over the dependent form's: each pair less the GEMV alone) and --forecast from critical_path.py (that
# factor on the norms' tails in the committed timeline, which sees what the norm's start does to the next kernel's)
s43_rung() {
  chain_rung s43-norm-wait $S43_NORMWAIT_REG add_rmsnorm triton_pdl triton_pdl_wait normwait "no norm" norm-wait \
      _add_rmsnorm_kernel "the residual add and norm launched as a PDL dependent (started while the kernel before \
runs, its gain requested before the wait; the same bits as triton_pdl)"
}
# proof_attn_pdl: attention=cupy_splitk_bf16_deep_pdl (session 35): its bits against cupy_splitk_bf16 eagerly (the
# 48B's shape and those its policy launches plainly) and in a captured chain of MLA layers after PDL GEMVs, then the
# cat-attention-o_proj layer timed under the step's deep form and it, and without the attention (-k deep_pdl; its
# record $DJ/perop-attnpdl-bfloat16.json)
proof_attn_pdl() {
  run gpu-tests-attn-pdl 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k deep_pdl tests/backends/test_cupy_kernels.py tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-attn-pdl.xml"
}
# s44_rung: attention=cupy_splitk_bf16_deep_pdl over the step now, --expect from perop-attnpdl (the deep form's own
# time in the chain over the PDL form's: each column less the cat and o_proj alone) and --forecast from critical_path.py
# (that factor on the four MLA kernels' tails in the committed timeline)
s44_rung() {
  chain_rung s44-attn-pdl $S44_ATTNPDL_REG attention cupy_splitk_bf16_deep cupy_splitk_bf16_deep_pdl attnpdl \
      "no attention" attn-pdl "mla_absorb_deep mla_split_mma mla_combine_deep mla_up_deep" "the MLA decode's kernels \
launched with programmatic dependent launch (the absorb's and up projection's weights requested before their waits; \
the same bits as the deep form)"
}
proof_pdl_stack() {  # rungs45's proofs: rungs43's and rungs44's GPU tests (each writes its record)
  proof_norm_wait
  proof_attn_pdl
}
# s45_rung: add_rmsnorm=triton_pdl_wait and attention=cupy_splitk_bf16_deep_pdl swapped together over the step now, the
# captured gate, one pair: --expect from both records (each op's own time in its chain), --forecast with both factors
s45_rung() {
  local name=s45-pdl-stack reg=$S45_PDLSTACK_REG base fn fa
  base=$(now_reg decode-$name) || return 0
  fn=$(perop_own normwait triton_pdl triton_pdl_wait "no norm" $name)
  fa=$(perop_own attnpdl cupy_splitk_bf16_deep cupy_splitk_bf16_deep_pdl "no attention" $name)
  proven_with_factor $name norm-wait "$fn" || return 0
  proven_with_factor $name attn-pdl "$fa" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  swap_all $name $reg $base "add_rmsnorm=triton_pdl_wait attention=cupy_splitk_bf16_deep_pdl" \
      || { log "decode-$name: left out (its registry was not made)"; return 0; }
  captured_gate $name $reg || return 0
  forecast $name --scale _add_rmsnorm_kernel=$fn --scale mla_absorb_deep=$fa --scale mla_split_mma=$fa \
      --scale mla_combine_deep=$fa --scale mla_up_deep=$fa || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes add_rmsnorm,attention --prediction $DJ/diag-decode-$name.json \
      --expect "add_rmsnorm=$fn,attention=$fa" --forecast $DJ/forecast-$name.json \
      --change "add_rmsnorm=triton_pdl_wait attention=cupy_splitk_bf16_deep_pdl: rungs43's and rungs44's PDL forms \
together (the residual-add norms and the MLA decode's kernels started early; the step's bits), over $(basename $base), \
graph"
  return 0
}
proof_nones49() {  # rungs49's proofs: rungs45's (the PDL norm's and attention's) and the pairs gate/up's
  proof_pdl_stack
  proof_exp_q8w
}
# s49_rung: rungs45's PDL stack and moe_experts=cupy_rowwarp_pdl_q8_pairs swapped together over the step now, the
# captured gate, one pair: --expect from the three records (the norm's and the attention's own time in their chains,
# the experts' chain under the step's Q8 hidden pair against the pairs form), --forecast with the three factors
S49_PAIRS="add_rmsnorm=triton_pdl_wait attention=cupy_splitk_bf16_deep_pdl moe_experts=cupy_rowwarp_pdl_q8_pairs"
s49_rung() {
  local name=s49-nones reg=$S49_NONES_REG base fn fa fe
  base=$(now_reg decode-$name) || return 0
  fn=$(perop_own normwait triton_pdl triton_pdl_wait "no norm" $name)
  fa=$(perop_own attnpdl cupy_splitk_bf16_deep cupy_splitk_bf16_deep_pdl "no attention" $name)
  fe=$(perop expq8w cupy_rowwarp_pdl_q8_hidden cupy_rowwarp_pdl_q8_pairs)
  proven_with_factor $name norm-wait "$fn" || return 0
  proven_with_factor $name attn-pdl "$fa" || return 0
  proven_with_factor $name exp-q8w "$fe" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  swap_all $name $reg $base "$S49_PAIRS" || { log "decode-$name: left out (its registry was not made)"; return 0; }
  captured_gate $name $reg || return 0
  forecast $name --scale _add_rmsnorm_kernel=$fn --scale mla_absorb_deep=$fa --scale mla_split_mma=$fa \
      --scale mla_combine_deep=$fa --scale mla_up_deep=$fa --scale moe_q4_k_gateup=$fe --scale moe_q4_k_down=$fe \
      || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes add_rmsnorm,attention,moe_experts \
      --prediction $DJ/diag-decode-$name.json --expect "add_rmsnorm=$fn,attention=$fa,moe_experts=$fe" \
      --forecast $DJ/forecast-$name.json --change "$S49_PAIRS: the step's gaining nones stacked (rungs45's PDL forms, \
the step's bits, with the pairs gate/up, the act_q8 row), over $(basename $base), graph"
  return 0
}
# s50_rung: the pairs pair's ids-once down over the step now, only where the step's experts are the pairs pair (the
# s49 step): over another pair the swap would change gate/up too, which is not this rung's change
s50_rung() {
  local name=s50-pairs-ld base
  base=$(now_reg decode-$name) || return 0
  python3 bench/registry_selects.py $base moe_experts=cupy_rowwarp_pdl_q8_pairs > /dev/null || {
    log "decode-$name: left out (the step now, $(basename $base), does not select moe_experts=cupy_rowwarp_pdl_q8_pairs)"
    return 0; }
  experts_rung $name $S50_PAIRSLD_REG cupy_rowwarp_pdl_q8_pairs_ld expq8l exp-q8l "the pairs pair with its down's \
expert ids and routing weights read once a warp, a lane a slot, not a round trip a round (DOWN_LD_FORM; the same bits \
as cupy_rowwarp_pdl_q8_pairs)" cupy_rowwarp_pdl_q8_pairs
}
proof_xpf() {  # the xpf forms (written after session 38): the q8_tall chain's bits through the xpf launcher replayed
  # from a graph, the warp form's bits at four shapes in three dtypes and its refusals; the pairs pair's bits at three
  # MoE shapes, replayed after the PDL norm and router, NaN for a bad id or a non-finite x; each timed beside its plain
  # form (-k xpf; records $DJ/perop-q8xpf-bfloat16.json and perop-expxpf-bfloat16.json)
  cupy_proof gpu-tests-xpf 180 xpf
}
# s51_rung: both xpf forms swapped together over the step now where it runs their plain forms (the s49 step: the Q8
# tall GEMVs with the float warp form for the short ones, and the pairs pair), the captured gate, one pair: --expect
# from the two records, --forecast scaling the warp GEMVs' and the downs' tails
S51_PAIRS="linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xpf moe_experts=cupy_rowwarp_pdl_q8_pairs_xpf"
s51_rung() {
  gemv_down_rung s51-xpf $S51_XPF_REG "$S51_PAIRS" q8xpf cupy_rowwarp_pdl_q8_tall_xpf xpf expxpf \
      cupy_rowwarp_pdl_q8_pairs_xpf xpf "the o_proj-sized GEMVs and the MoE down with their activations prefetched \
into L1 right after the PDL wait (the same bits)"
}
# gemv_down_rung NAME REG PAIRS LSTEM LIMPL LTESTS ESTEM EIMPL ETESTS TEXT: rung decode-NAME swapping PAIRS (a Q4_K
# GEMV form and an experts form) together over the step now where it runs their plain forms (the Q8 tall GEMVs and
# the pairs pair: the s49 step), after gpu-tests-LTESTS and gpu-tests-ETESTS passed and gave factors from
# perop-LSTEM (LIMPL against cupy_rowwarp_pdl_q8_tall) and perop-ESTEM (EIMPL against cupy_rowwarp_pdl_q8_pairs);
# the captured gate, one pair: --expect from the two records, --forecast scaling the warp GEMVs' and the downs' tails
gemv_down_rung() {
  local name=$1 reg=$2 pairs=$3 lstem=$4 limpl=$5 ltests=$6 estem=$7 eimpl=$8 etests=$9 text=${10} base fl fe
  base=$(now_reg decode-$name) || return 0
  python3 bench/registry_selects.py $base linear@Q4_K=cupy_rowwarp_pdl_q8_tall moe_experts=cupy_rowwarp_pdl_q8_pairs \
      > /dev/null || { log "decode-$name: left out (the step now, $(basename $base), does not select \
linear@Q4_K=cupy_rowwarp_pdl_q8_tall and moe_experts=cupy_rowwarp_pdl_q8_pairs)"; return 0; }
  fl=$(perop $lstem cupy_rowwarp_pdl_q8_tall $limpl)
  fe=$(perop $estem cupy_rowwarp_pdl_q8_pairs $eimpl)
  proven_with_factor $name $ltests "$fl" || return 0
  proven_with_factor $name $etests "$fe" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  swap_all $name $reg $base "$pairs" || { log "decode-$name: left out (its registry was not made)"; return 0; }
  captured_gate $name $reg || return 0
  forecast $name --scale linear_q4_k_rowwarppdl_bf16=$fl --scale moe_q4_k_downq8pdl=$fe || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes linear@Q4_K,moe_experts \
      --prediction $DJ/diag-decode-$name.json --expect "linear@Q4_K=$fl,moe_experts=$fe" \
      --forecast $DJ/forecast-$name.json --change "$pairs: $text, over $(basename $base), graph"
  return 0
}
proof_xregs() {  # linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xr (session 39): the q8_tall chain's bits through its launcher
  # replayed from a graph, the warp form's bits at four shapes in three dtypes and its refusals; timed beside the step's
  # form after the gated norm (-k xregs; its record $DJ/perop-q8xr-bfloat16.json)
  cupy_proof gpu-tests-xregs 150 xregs
}
proof_xr52() {  # rungs52's two: the xr GEMV's and the ids-once down's
  proof_xregs
  proof_exp_q8l
}
# s52_rung: the xr GEMV and the ids-once down swapped together over the step now where it runs their plain forms (the
# s49 step: the Q8 tall GEMVs with the float warp form for the short ones, and the pairs pair), the captured gate, one
# pair: --expect from the two records, --forecast scaling the warp GEMVs' and the downs' tails
S52_PAIRS="linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xr moe_experts=cupy_rowwarp_pdl_q8_pairs_ld"
s52_rung() {
  gemv_down_rung s52-xr-ld $S52_XRLD_REG "$S52_PAIRS" q8xr cupy_rowwarp_pdl_q8_tall_xr xregs expq8l \
      cupy_rowwarp_pdl_q8_pairs_ld exp-q8l "the o_proj-sized GEMVs with x loaded into registers two rounds at a time \
after the PDL wait (the same bits), with the pairs pair's ids-once down (rungs50's none)"
}
proof_exp_hs() {  # moe_experts=cupy_rowwarp_pdl_q8_pairs_hs (written after session 40): the pairs pair's bits at four
  # MoE shapes in three dtypes (one past DOWN_LD_MAX_K, then past DOWN_HS_SMEM_LIMIT: the warp down by the stated
  # policy) and its refusals, replayed after the PDL norm and router, close to the torch experts, NaN for a bad id or a
  # non-finite x; timed beside the step's experts (-k staged; its record $DJ/perop-exphs-bfloat16.json)
  cupy_proof gpu-tests-exp-hs 150 staged
}
# s53_rung: the staged down over the step now, only where the step's experts are the ids-once pairs pair (the s52
# step): over another pair the swap would change more than the down's reading of the hidden vector
s53_rung() {
  ld_down_rung s53-exp-hs $S53_HS_REG cupy_rowwarp_pdl_q8_pairs_hs exphs exp-hs "the ids-once down reading the \
hidden vector from shared memory, copied once a block right after the PDL wait, not each lane's share by L2 round \
trips in turn (the same bits as cupy_rowwarp_pdl_q8_pairs)"
}
proof_exp_l2pf() {  # moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf (written in session 40: the down's later weights and
  # gate/up's shared-expert rows asked into the L2 before each one's wait): the pairs pair's bits at four MoE shapes in
  # three dtypes (one past DOWN_LD_MAX_K), whatever DOWN_LD_FORM says, and its refusals; replayed after
  # the PDL norm and router, close to the torch experts, NaN for a bad id or a non-finite x; timed beside the step's
  # experts (-k l2pf; its record $DJ/perop-expl2pf-bfloat16.json)
  cupy_proof gpu-tests-exp-l2pf 150 l2pf
}
# s54_rung: the L2-prefetching down over the step now, only where the step's experts are the ids-once pairs pair
s54_rung() {
  ld_down_rung s54-exp-l2pf $S54_L2PF_REG cupy_rowwarp_pdl_q8_pairs_l2pf expl2pf exp-l2pf "the ids-once down asking \
for its later groups' weight lines in the L2 before its PDL wait, while gate/up runs, and gate/up the shared \
expert's rows while the router runs (the same bits as cupy_rowwarp_pdl_q8_pairs)"
}
proof_attn_act_pdl() {  # attention=cupy_splitk_bf16_deep_active_pdl (session 41): its bits and cache row against
  # cupy_splitk_bf16 at five shapes in two dtypes, four chained MLA layers replayed from a graph at three positions, one
  # captured call replayed at positions leaving 131 .. 0 slices empty; timed beside the step's PDL attention between
  # the cat and the o_proj (its record $DJ/perop-attnactpdl-bfloat16.json). -k names deep_pdl too: the bit tests'
  # names say deep_pdl, and the PDL form's own tests run again beside them (~15 s)
  run gpu-tests-attn-act-pdl 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k "deep_pdl or active_pdl" tests/backends/test_cupy_kernels.py tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-attn-act-pdl.xml"
}
proof_stack55() {  # rungs55's two: the l2pf experts' and the active PDL attention's
  proof_exp_l2pf
  proof_attn_act_pdl
}
# s55_rung: rungs54's l2pf experts and the active PDL attention swapped together over the step now where it runs their
# plain forms (the s52 step: the ids-once pairs pair, the PDL attention), the captured gate, one pair: --expect from the
# two records (the experts' chain against the ids-once pair, the attention's own time before the o_proj), --forecast
# scaling the downs and the split and combine
S55_PAIRS="moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf attention=cupy_splitk_bf16_deep_active_pdl"
s55_rung() {
  local name=s55-stack reg=$S55_STACK_REG base fe fa
  base=$(now_reg decode-$name) || return 0
  python3 bench/registry_selects.py $base moe_experts=cupy_rowwarp_pdl_q8_pairs_ld \
      attention=cupy_splitk_bf16_deep_pdl > /dev/null || { log "decode-$name: left out (the step now, \
$(basename $base), does not select moe_experts=cupy_rowwarp_pdl_q8_pairs_ld and attention=cupy_splitk_bf16_deep_pdl)"
    return 0; }
  fe=$(perop expl2pf cupy_rowwarp_pdl_q8_pairs_ld cupy_rowwarp_pdl_q8_pairs_l2pf)
  fa=$(perop_own attnactpdl cupy_splitk_bf16_deep_pdl cupy_splitk_bf16_deep_active_pdl "no attention" $name)
  proven_with_factor $name exp-l2pf "$fe" || return 0
  proven_with_factor $name attn-act-pdl "$fa" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  swap_all $name $reg $base "$S55_PAIRS" || { log "decode-$name: left out (its registry was not made)"; return 0; }
  captured_gate $name $reg || return 0
  forecast $name --scale moe_q4_k_downq8pdl=$fe --scale mla_split_mma=$fa --scale mla_combine_deep=$fa || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes moe_experts,attention \
      --prediction $DJ/diag-decode-$name.json --expect "moe_experts=$fe,attention=$fa" \
      --forecast $DJ/forecast-$name.json --change "$S55_PAIRS: rungs54's none (the l2pf experts) stacked with the \
PDL attention skipping a short context's empty slices (the same bits), over $(basename $base), graph"
  return 0
}
# proof_router_merge: moe_router=cupy_rowwarp_pdl_merge (session 42): cupy_rowwarp's bits at the 48B's, grouped and
# limit shapes in three dtypes (E > 256 and top_k > 8 by rt_route), the ties, a replayed graph, a NaN token; then the
# step's norm-and-router pair timed with each router (-k merge; its record $DJ/perop-routermerge-bfloat16.json)
proof_router_merge() {
  run gpu-tests-router-merge 120 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k merge tests/backends/test_cupy_moe_router.py tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-router-merge.xml"
}
# s55_swap_rung NAME REG OP FROM TO STEM TESTS KERNEL TEXT: rung decode-NAME, OP=TO over the step now where it runs
# OP=FROM (the s55 step), after gpu-tests-TESTS passed and gave a factor from perop-STEM-bfloat16.json (TO against
# FROM); the captured gate, one pair: --expect OP from the record, --forecast scaling the step's KERNEL by it on the s55
# step's own replay (S55_TIMELINE). Over another selection the swap would change what the record did not time
s55_swap_rung() {
  local name=$1 reg=$2 op=$3 from=$4 to=$5 stem=$6 tests=$7 kern=$8 text=$9 base fac
  base=$(now_reg decode-$name) || return 0
  python3 bench/registry_selects.py $base $op=$from > /dev/null || { log "decode-$name: left out (the step now, \
$(basename $base), does not select $op=$from)"; return 0; }
  fac=$(perop $stem $from $to)
  proven_with_factor $name $tests "$fac" || return 0
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  swap_one $name $reg $base $op=$to || return 0
  captured_gate $name $reg || return 0
  FORECAST_TIMELINE=$S55_TIMELINE forecast $name --scale $kern=$fac || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes $op --prediction $DJ/diag-decode-$name.json \
      --expect "$op=$fac" --forecast $DJ/forecast-$name.json --change "$op=$to: $text, over $(basename $base), graph"
  return 0
}
# s56_rung: the merged routing picks over the step's PDL router (s55_swap_rung), forecast on the routers
s56_rung() {
  s55_swap_rung s56-router-merge $S56_MERGE_REG moe_router cupy_rowwarp_pdl cupy_rowwarp_pdl_merge routermerge \
      router-merge moe_router_rowwarp_pdl "the routing's picks by a sorting network and a butterfly merge of the lanes' \
lists, no pick rounds (the same bits as cupy_rowwarp)"
}
# proof_gu_grouped: moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_grouped (session 43): the pairs pair's bits at five MoE
# shapes in three dtypes (groups empty and uneven; one past DOWN_LD_MAX_K), its refusals, replayed after the PDL norm
# and router, close to the torch experts, NaN for a bad id or a non-finite x; then the norm-router-experts chain timed
# under it and the step's l2pf pair (-k grouped; its record $DJ/perop-expgrp-bfloat16.json)
proof_gu_grouped() {
  cupy_proof gpu-tests-gu-grouped 150 grouped
}
# s57_rung: the grouped gate/up over the step's l2pf pair (s55_swap_rung), forecast on the gate/up kernels
s57_rung() {
  s55_swap_rung s57-gu-grouped $S57_GROUPED_REG moe_experts cupy_rowwarp_pdl_q8_pairs_l2pf \
      cupy_rowwarp_pdl_q8_pairs_l2pf_grouped expgrp gu-grouped moe_q4_k_gateup "the l2pf pair's gate/up with its weight \
copies in three commit groups of super-blocks, each dotted as it lands (the same bits as cupy_rowwarp_pdl_q8_pairs)"
}
# proof_gu_streamed: moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_streamed (session 46): the grouped proof's tests for
# the form with one group requested ahead (-k streamed; its record $DJ/perop-expstr-bfloat16.json)
proof_gu_streamed() {
  cupy_proof gpu-tests-gu-streamed 150 streamed
}
# s58_rung: the streamed gate/up over the step's l2pf pair (s55_swap_rung), forecast on the gate/up kernels
s58_rung() {
  s55_swap_rung s58-gu-streamed $S58_STREAMED_REG moe_experts cupy_rowwarp_pdl_q8_pairs_l2pf \
      cupy_rowwarp_pdl_q8_pairs_l2pf_streamed expstr gu-streamed moe_q4_k_gateup "the l2pf pair's gate/up with its \
weight copies in three groups of super-blocks, each requested once the one before has landed and dotted as it lands \
(the same bits as cupy_rowwarp_pdl_q8_pairs)"
}
# ld_down_rung NAME REG IMPL STEM TESTS TEXT: rung decode-NAME, moe_experts=IMPL (a form of the ids-once pairs pair's
# down) over the step now where its experts are that pair (the s52 step), after gpu-tests-TESTS passed and gave a
# factor from perop-STEM-bfloat16.json (IMPL against cupy_rowwarp_pdl_q8_pairs_ld); over another pair the swap would
# change more than the down's form
ld_down_rung() {
  local name=$1 base
  base=$(now_reg decode-$name) || return 0
  python3 bench/registry_selects.py $base moe_experts=cupy_rowwarp_pdl_q8_pairs_ld > /dev/null || {
    log "decode-$name: left out (the step now, $(basename $base), does not select \
moe_experts=cupy_rowwarp_pdl_q8_pairs_ld)"
    return 0; }
  experts_rung $name "$2" "$3" "$4" "$5" "$6" cupy_rowwarp_pdl_q8_pairs_ld
}
# proof_moe_norm: moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm (session 36): its GPU tests (the experts'
# bits the Q8 hidden pair's, the norm within add_rmsnorm's row, in three dtypes at the 48B's shape; a chain replayed
# from a graph after the PDL norm and router; the stated policy; the counter), the engine's fuse_moe_norm on CUDA,
# then the MoE chain timed with and without the fold (its record $DJ/perop-moenorm-bfloat16.json)
# the folds' proofs write kernels-*.json too (SPARKOPS_PEROP_KERNELS: each column kernel by kernel; session 37's lead)
proof_moe_norm() {
  run gpu-tests-moe-norm 180 env SPARKOPS_PEROP_DIR="$DJ" SPARKOPS_PEROP_KERNELS=1 \
      python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_cupy_moe_experts_add_rmsnorm.py tests/engine/test_moe_norm_fusion.py \
      "tests/backends/test_cupy_timing.py::test_experts_norm_fused_side_by_side" --junitxml="$R/gpu-tests-moe-norm.xml"
}
# s46_rung: [engine] fuse_moe_norm with moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm over the step now
# (swapped in, proven, then the option), the captured gate, then one pair: --expect moe_experts from the record (the
# experts and closing norm's own time in the chain over the fused op's), --forecast from critical_path.py (the 26
# norms after the MoE down removed, the down's end later by the record's measured tail a layer)
s46_rung() {
  local name=s46-moe-norm reg=$S46_MOENORM_REG base fac tail
  base=$(now_reg decode-$name) || return 0
  fac=$(perop_minus moenorm chain cupy_rowwarp_pdl_q8_hidden_norm "no experts")
  tail=$(python3 bench/perop_factor.py "$DJ/perop-moenorm-bfloat16.json" cupy_rowwarp_pdl_q8_hidden_norm \
      "no closing norm" --gap 26 2>> $R/suite.err || true)
  proven_with_factor $name moe-norm "$fac" || return 0
  [ -n "$tail" ] || { log "decode-$name: left out (the record gave no tail a layer)"; return 0; }
  python3 bench/registry_selects.py "$base" moe_experts=cupy_rowwarp_pdl_q8_hidden > /dev/null 2>&1 || log "decode-$name: \
the step now ($(basename "$base")) does not select moe_experts=cupy_rowwarp_pdl_q8_hidden: x$fac is the record's, not \
the step's"
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ]; then
    run swap-$name 30 bash -c 'swap_into "$@"' _ $reg.swap $base moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm
    [ -f $reg.swap ] && cp $reg.swap $reg.new && sparkops engine fuse_moe_norm=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  [ -f $reg ] && python3 bench/registry_selects.py $reg moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm \
      > /dev/null || { log "decode-$name: left out (its registry does not select \
moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm)"; return 0; }
  captured_gate $name $reg || return 0
  forecast $name --remove '_add_rmsnorm_kernel<moe_q4_k_downq8pdl' --shift "moe_q4_k_downq8pdl=-$tail" || return 0
  forecast_gains $name || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes engine,moe_experts_add_rmsnorm \
      --prediction $DJ/diag-decode-$name.json --expect "moe_experts=$fac" --forecast $DJ/forecast-$name.json \
      --change "[engine] fuse_moe_norm with moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm: each MoE layer's \
experts and the next block's residual add and norm as one op (the down's last block norms the row; one launch fewer a \
layer), over $(basename $base), graph"
  return 0
}
# forecast_gains NAME: true when rung decode-NAME's critical-path forecast ($DJ/forecast-NAME.json) is a gain (x1.000
# or more); else the rung is said to be left out with the forecast: GPU session 36's first records put both norm folds'
# tails at 5.5-15.9 us a layer against the ~2 us norm they remove, which a pair would only confirm
forecast_gains() {
  local ratio
  ratio=$(python3 -c "import json, sys; print(round(json.load(open(sys.argv[1]))['all']['ratio'], 3))" \
      "$DJ/forecast-$1.json" 2>> $R/suite.err)
  python3 -c "import json, sys; sys.exit(0 if float(sys.argv[1]) >= 1.0 else 1)" "${ratio:-0}" && return 0
  log "decode-$1: left out (its critical-path forecast is a loss: x${ratio:-?})"
  return 1
}
# proof_oproj_norm: linear_add_rmsnorm=cupy_rowwarp_pdl_norm (session 36): its GPU tests (the projection's bits the warp
# form's, the norm within add_rmsnorm's row, in three dtypes at the o_proj's shape and two others; a chain of fused
# calls replayed from a graph; the stated policy; the counter), the engine's fuse_oproj_norm on CUDA, then the
# o_proj-and-norm pair timed with and without the fold (its record $DJ/perop-oprojnorm-bfloat16.json)
proof_oproj_norm() {
  run gpu-tests-oproj-norm 180 env SPARKOPS_PEROP_DIR="$DJ" SPARKOPS_PEROP_KERNELS=1 \
      python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_cupy_linear_add_rmsnorm.py tests/engine/test_oproj_norm_fusion.py \
      "tests/backends/test_cupy_timing.py::test_oproj_norm_fused_side_by_side" --junitxml="$R/gpu-tests-oproj-norm.xml"
}
proof_norm_folds() {  # rungs48's proofs: rungs46's and rungs47's GPU tests (each writes its record)
  proof_moe_norm
  proof_oproj_norm
}
# oproj_expect: the --expect factor on add_rmsnorm of the o_proj fold from perop-oprojnorm (the norm's own time in the
# chain over what the fold adds to the GEMV), for the 27 of a token's 54 add_rmsnorm calls it takes (Amdahl on half
# the op's time); empty, the reason in suite.err, without one
oproj_expect() {
  python3 bench/perop_factor.py "$DJ/perop-oprojnorm-bfloat16.json" chain cupy_rowwarp_pdl_norm --minus "no norm" \
      --share 0.5 2>> $R/suite.err || true
}
# oproj_tail: what the fold adds to the o_proj a layer in us (perop-oprojnorm's fused column less the GEMV's, over the
# 27 layers a token), the forecast's --shift; empty, the reason in suite.err, without one
oproj_tail() {
  python3 bench/perop_factor.py "$DJ/perop-oprojnorm-bfloat16.json" cupy_rowwarp_pdl_norm "no norm" --gap 27 \
      2>> $R/suite.err || true
}
# s47_rung: [engine] fuse_oproj_norm with linear_add_rmsnorm=cupy_rowwarp_pdl_norm over the step now (swapped in,
# proven, then the option), the captured gate, then one pair: --expect add_rmsnorm (oproj_expect), --forecast from
# critical_path.py (the norms after the warp-form GEMV removed, its end later by oproj_tail)
s47_rung() {
  local name=s47-oproj-norm reg=$S47_OPROJNORM_REG base fac tail
  base=$(now_reg decode-$name) || return 0
  fac=$(oproj_expect)
  tail=$(oproj_tail)
  proven_with_factor $name oproj-norm "$fac" || return 0
  [ -n "$tail" ] || { log "decode-$name: left out (the record gave no tail a layer)"; return 0; }
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ]; then
    run swap-$name 30 bash -c 'swap_into "$@"' _ $reg.swap $base linear_add_rmsnorm=cupy_rowwarp_pdl_norm
    [ -f $reg.swap ] && cp $reg.swap $reg.new && sparkops engine fuse_oproj_norm=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  [ -f $reg ] && python3 bench/registry_selects.py $reg linear_add_rmsnorm=cupy_rowwarp_pdl_norm > /dev/null \
      || { log "decode-$name: left out (its registry does not select linear_add_rmsnorm=cupy_rowwarp_pdl_norm)"; \
           return 0; }
  captured_gate $name $reg || return 0
  forecast $name --remove '_add_rmsnorm_kernel<linear_q4_k_rowwarppdl' \
      --shift "linear_q4_k_rowwarppdl_bf16>_add_rmsnorm_kernel=-$tail" || return 0
  forecast_gains $name || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes engine,linear_add_rmsnorm \
      --prediction $DJ/diag-decode-$name.json --expect "add_rmsnorm=$fac" --forecast $DJ/forecast-$name.json \
      --change "[engine] fuse_oproj_norm with linear_add_rmsnorm=cupy_rowwarp_pdl_norm: each attention block's o_proj and \
the FFN's residual add and norm as one op (the GEMV's last block norms the row; one launch fewer a layer), over \
$(basename $base), graph"
  return 0
}
# s48_rung: both folds over the step now (both swaps, then both options), the captured gate, one pair: --expect from
# both records (moe_experts as rungs46's, add_rmsnorm as rungs47's), --forecast with both changes at once
s48_rung() {
  local name=s48-norm-folds reg=$S48_FOLDS_REG base fm fo tm to
  base=$(now_reg decode-$name) || return 0
  fm=$(perop_minus moenorm chain cupy_rowwarp_pdl_q8_hidden_norm "no experts")
  tm=$(python3 bench/perop_factor.py "$DJ/perop-moenorm-bfloat16.json" cupy_rowwarp_pdl_q8_hidden_norm \
      "no closing norm" --gap 26 2>> $R/suite.err || true)
  fo=$(oproj_expect)
  to=$(oproj_tail)
  proven_with_factor $name moe-norm "$fm" || return 0
  proven_with_factor $name oproj-norm "$fo" || return 0
  [ -n "$tm" ] && [ -n "$to" ] || { log "decode-$name: left out (a record gave no tail a layer)"; return 0; }
  rebase $name $base
  [ -s $DJ/diag-decode-$name.json ] || diagnose_base $name $base
  fresh_over $reg $base
  if [ ! -f $reg ]; then
    run swap-$name 30 bash -c 'swap_into "$@"' _ $reg.swap $base \
        moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm linear_add_rmsnorm=cupy_rowwarp_pdl_norm
    [ -f $reg.swap ] && cp $reg.swap $reg.new \
        && sparkops engine fuse_moe_norm=on fuse_oproj_norm=on --registry $reg.new > /dev/null \
        && mv $reg.new $reg && echo "$base" > $reg.base
  fi
  [ -f $reg ] && python3 bench/registry_selects.py $reg moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm \
      linear_add_rmsnorm=cupy_rowwarp_pdl_norm > /dev/null || { log "decode-$name: left out (its registry was not \
made)"; return 0; }
  captured_gate $name $reg || return 0
  forecast $name --remove '_add_rmsnorm_kernel<moe_q4_k_downq8pdl' --shift "moe_q4_k_downq8pdl=-$tm" \
      --remove '_add_rmsnorm_kernel<linear_q4_k_rowwarppdl' \
      --shift "linear_q4_k_rowwarppdl_bf16>_add_rmsnorm_kernel=-$to" || return 0
  forecast_gains $name || return 0
  [ -s $DJ/diag-decode-$name.json ] || { log "decode-$name: left out (no diagnosis of $(basename $base))"; return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $base \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes engine,moe_experts_add_rmsnorm,linear_add_rmsnorm \
      --prediction $DJ/diag-decode-$name.json --expect "add_rmsnorm=$fo,moe_experts=$fm" \
      --forecast $DJ/forecast-$name.json --change "[engine] fuse_moe_norm and fuse_oproj_norm: rungs46's and rungs47's \
folds together (every residual-add norm of the step but the dense layer's closing one in the last block of the kernel \
before it), over $(basename $base), graph"
  return 0
}
s26w_rung() {
  experts_rung s26-exp-wide $S26_EXPWIDE_REG cupy_rowwarp_pdl_wide expwide exp-wide "down's whole row (the 48B's 36 \
super-blocks a warp) requested before its wait for gate/up (the same bits as cupy_rowwarp)"
}
proof_f16_pdl() {  # linear=triton_pdl on the step's F16 gate GEMVs (session 25): the PDL GEMV's GPU tests - its bits
  # against triton_lastblock at the 48B's shapes and in chains of dependent GEMVs, eager and replayed from CUDA graphs,
  # the 20-GEMV chain timed - and a token's 40 F16 gate GEMVs bit for bit and timed each way in one CUDA graph (its
  # record, $DJ/perop-f16pdl-bfloat16.json, is the rung's forecast)
  run gpu-tests-f16-pdl 120 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k pdl \
      tests/backends/test_triton_linear.py --junitxml="$R/gpu-tests-f16-pdl.xml"
}
# s25_pair NAME REG CHANGES EXPECT TEXT: rung decode-NAME, REG over the rungs23 registry, after REG's captured gate,
# forecast on that registry's one diagnosis (diag-decode-s25-base: the same base for both rungs of stage rungs25)
s25_pair() {
  local name=$1 reg=$2 changes=$3 expect=$4 text=$5
  [ -f $reg ] || { log "decode-$name: left out (no registry $reg)"; return 0; }
  captured_gate $name $reg || return 0
  [ -s $DJ/diag-decode-s25-base.json ] || { log "decode-$name: left out (no diagnosis of $(basename $S23_REG))"; \
      return 0; }
  run decode-$name 150 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $S23_REG \
      --vs $reg --graph A,B $GATE $FILL_LEAN --changes $changes --prediction $DJ/diag-decode-s25-base.json \
      --expect "$expect" --change "$text, over $(basename $S23_REG), graph"
  return 0
}
# s25_rungs: stage rungs25's two rungs over the rungs23 registry (made by swaps where missing), each left out, saying
# why, without its proof's pass or its record's factor: linear=triton_pdl (decode-s25-f16pdl), forecast on linear@F16
# from the F16 side-by-side, then fuse_kda_gates with kda_lowrank_norm=triton_split_pdl (decode-s25-gates-pdl), forecast
# on kda_norm from that form's figure in the fused gates' record and on linear@F16 as session 24's rung over this base
# was (S24_F16_OVER_S23). The base is diagnosed once for both, and only when either can be timed; rebase forgets what
# was done over another base on this machine
s25_rungs() {
  local f16 kda conv lin="" gates="" cv="" n reg=$S25_GATESPDL_REG
  f16=$(perop f16pdl triton_lastblock triton_pdl)
  kda=$(perop kdalowrank kda_norm triton_split_pdl)
  conv=$(perop convpdl triton triton_pdl)
  proven_with_factor s25-f16pdl f16-pdl "$f16" && lin=1
  proven_with_factor s25-gates-pdl kda-lowrank "$kda" && gates=1
  proven_with_factor s25-conv-pdl conv-pdl "$conv" && cv=1
  [ -n "$lin$gates$cv" ] || return 0
  if ! s23_step; then
    log "decode-s25-chain, decode-s25-conv-pdl, decode-s25-f16pdl, decode-s25-gates-pdl: left out (the rungs23 \
registry $S23_REG was not made)"
    return 0
  fi
  for n in s25-base s25-chain s25-conv-pdl s25-f16pdl s25-gates-pdl; do rebase $n $S23_REG; done
  [ -s $DJ/diag-decode-s25-base.json ] || diagnose_base s25-base $S23_REG  # or rungs26's of the same registry
  if [ -z "$lin" ] || [ -z "$cv" ]; then
    log "decode-s25-chain: left out (it needs both PDL swaps' proofs and records)"
  else  # the two PDL swaps together first (the combination, then its parts)
    swap_all s25-chain $S25_CHAIN_REG $S23_REG "linear=triton_pdl short_conv=triton_pdl"
    s25_pair s25-chain $S25_CHAIN_REG linear,short_conv "linear@F16=$f16,short_conv=$conv" "linear=triton_pdl \
short_conv=triton_pdl: the step's last two kinds of launch without PDL (the 40 F16 gate GEMVs and the 20 fused q/k/v \
short convs a token) launched with it, together (the same bits as triton_lastblock and triton)"
  fi
  if [ -n "$cv" ]; then
    swap_all s25-conv-pdl $S25_CONVPDL_REG $S23_REG short_conv=triton_pdl
    s25_pair s25-conv-pdl $S25_CONVPDL_REG short_conv "short_conv=$conv" "short_conv=triton_pdl: the fused q/k/v short \
conv launched with programmatic dependent launch, its window and taps requested before the wait for the q/k/v GEMV, \
kda_norm let start after it (the same bits as triton)"
  fi
  if [ -n "$lin" ]; then
    swap_all s25-f16pdl $S25_F16PDL_REG $S23_REG linear=triton_pdl
    s25_pair s25-f16pdl $S25_F16PDL_REG linear "linear@F16=$f16" "linear=triton_pdl (the default selection, which \
serves the F16 gate GEMVs alone; the Q4_K and Q6_K by_type selections stay): the 40 F16 GEMVs a token launched with \
programmatic dependent launch, each requesting its first weights while the kernel before it finishes (the same bits \
as triton_lastblock; session 23's PDL kernels paid ~2x their per-op forecast)"
  fi
  if [ -n "$gates" ]; then
    fresh_over $reg $S23_REG
    if [ ! -f $reg ] && swap_all s25-gates-pdl $reg.swap $S23_REG kda_lowrank_norm=triton_split_pdl; then
      cp $reg.swap $reg.new && sparkops engine fuse_kda_gates=on --registry $reg.new > /dev/null \
          && mv $reg.new $reg && echo "$S23_REG" > $reg.base
    fi
    s25_pair s25-gates-pdl $reg engine,kda_lowrank_norm "kda_norm=$kda,linear@F16=$S24_F16_OVER_S23" "[engine] \
fuse_kda_gates with kda_lowrank_norm=triton_split_pdl (the PDL form, chosen though slower per op than triton_split, \
whose rung lost in session 24 where a kernel without PDL ended the PDL chain before the o_proj): a KDA layer's two \
low-rank gate up-projections (f_b, g_b) inside its fused recurrence and norm"
  fi
  return 0
}
proof_router() {  # moe_router=cupy_rowwarp (session 15): the 48B's and grouped shapes against the reference, ties,
  # graph replay and the policy, the contract on CUDA, then timed beside triton_prefetch (its record,
  # $DJ/perop-router-*.json, is the rung's prediction)
  run gpu-tests-router 90 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k router \
      tests/backends/test_cupy_moe_router.py tests/backends/test_cupy_timing.py tests/backends/test_cupy_gate.py \
      --junitxml="$R/gpu-tests-router.xml"
}
# ncu_passes NAME REGEX LAUNCHES SCRIPT: Nsight Compute on the measured pass of a probe script that launches LAUNCHES
# kernels matching REGEX twice (a warm-up pass, then the measured one): the sections that say what binds
# (probe-ncu-NAME), then the instructions and the warps stalled per issue-active cycle by reason (probe-ncu-NAME-stalls,
# a pass of its own, so that a metric this ncu lacks costs only that pass), each report also as one table
# (bench/probes/ncu_table.py). Without ncu on the machine it says so and runs nothing.
ncu_passes() {
  local name=$1 regex=$2 n=$3 script=$4 metrics=smsp__inst_executed.sum reason f
  if ! command -v ncu > /dev/null; then
    log "probe-ncu-$name: no ncu on this machine; nothing profiled"
    return 0
  fi
  run probe-ncu-$name 150 ncu --clock-control none --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
      -k "regex:$regex" --launch-skip $n --launch-count $n python3 $script
  for reason in long_scoreboard short_scoreboard wait barrier mio_throttle math_pipe_throttle not_selected selected \
      lg_throttle dispatch_stall no_instruction drain membar branch_resolving; do
    metrics="$metrics,smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio"
  done
  run probe-ncu-$name-stalls 120 ncu --clock-control none --metrics "$metrics" -k "regex:$regex" --launch-skip $n \
      --launch-count $n python3 $script
  for f in probe-ncu-$name probe-ncu-$name-stalls; do
    [ -s "$R/$f.log" ] && python3 bench/probes/ncu_table.py "$R/$f.log" --json "$R/$f.json" > "$R/$f-table.txt" 2>&1
  done
  return 0
}
# proof_forms NAME K: a copy-form variant's proof (sessions 16-17): its GPU tests selected by K (bitwise the copy form,
# every row from NaN, its gate on CUDA), then the row-warp side-by-side with its column, whose record
# ($DJ/perop-rowwarp-*.json) is the rung's prediction
proof_forms() {
  run gpu-tests-$1 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      --timeout=$GPU_TEST_TIMEOUT -k "$2 or rowwarp_gemv_side_by_side" tests/backends/test_cupy_kernels.py \
      tests/backends/test_cupy_gate.py tests/backends/test_cupy_timing.py --junitxml="$R/gpu-tests-$1.xml"
  local rc=$?
  cp "$DJ"/perop-rowwarp-*.json "$R/" 2> /dev/null
  return $rc
}
# proof_rowwarp_side: the row-warp side-by-side alone (its record, $DJ/perop-rowwarp-*.json, forecasts a rung that changes
# the Q4_K GEMVs: pdl_factor's base). Session 18's first call lost the norm-PDL rung without it: the PDL proof writes
# only the MoE record
proof_rowwarp_side() {
  run gpu-tests-rowwarp-side 90 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      --timeout=$GPU_TEST_TIMEOUT -k rowwarp_gemv_side_by_side tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-rowwarp-side.xml"
  local rc=$?
  cp "$DJ"/perop-rowwarp-*.json "$R/" 2> /dev/null
  return $rc
}
# proof_attn_active: attention=cupy_splitk_bf16_active (session 18): the default's bits from NaN-filled buffers at short
# and full contexts and from one graph replayed at every position, the gate on CUDA (bit-identity to cupy_splitk_bf16),
# then timed beside it at pos 63 and at full depth (its record, $DJ/perop-attention-bfloat16.json, is the forecast)
# proof_attn_deep: attention=cupy_splitk_bf16_deep (written after session 21's device time): the default's bits for
# every activation dtype, both splits, and the plain absorb at another Dn; the gate on CUDA (bit-identity to
# cupy_splitk_bf16); then timed beside it at pos 63 and at full depth (its record, $DJ/perop-attndeep-bfloat16.json,
# is the forecast)
proof_attn_deep() {
  run gpu-tests-attn-deep 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      --timeout=$GPU_TEST_TIMEOUT -k "attention_deep or cupy_splitk_bf16_deep" tests/backends/test_cupy_kernels.py \
      tests/backends/test_cupy_gate.py tests/backends/test_cupy_timing.py --junitxml="$R/gpu-tests-attn-deep.xml"
}
proof_attn_active() {
  run gpu-tests-attn-active 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      --timeout=$GPU_TEST_TIMEOUT -k attention tests/backends/test_cupy_kernels.py tests/backends/test_cupy_gate.py \
      tests/backends/test_cupy_timing.py --junitxml="$R/gpu-tests-attn-active.xml"
  local rc=$?
  cp "$DJ"/perop-attention-*.json "$R/" 2> /dev/null
  return $rc
}
proof_copy2() { proof_forms copy2 copy2; }  # linear@Q4_K=cupy_rowwarp_copy2: the copy in two groups
proof_copy2x() { proof_forms copy2x "copy2 or copyx"; }  # cupy_rowwarp_copy2x: copyx and copy2x, x requested first
# probe_pdl_chain: bench/probes/pdl_chain.py, its JSON kept with the diagnoses ($DJ: rung norm-rowwarp-pdl's forecast)
probe_pdl_chain() {
  run probe-pdl-chain 150 python3 bench/probes/pdl_chain.py --out $DJ/probe-pdl-chain.json
  cp $DJ/probe-pdl-chain.json "$R/" 2> /dev/null
  return 0
}
# pdl_factor: linear@Q4_K's speed-up from the probe's savings a norm-and-projection pair (PDL_PAIRS add_rmsnorm pairs
# and PDL_GATED_PAIRS gated_rmsnorm pairs a token), taken off the row-warp side-by-side's time a token
# (cupy_rowwarp); empty (the rung is left out) without both
pdl_factor() {
  local s
  s=$(python3 -c "import json,sys; p = json.load(open(sys.argv[1])); \
print(($PDL_PAIRS * p['norm_pair']['saving_us'] + $PDL_GATED_PAIRS * p['gnorm_pair']['saving_us']) * 1e-6)" \
      $DJ/probe-pdl-chain.json 2> /dev/null) || return 0
  python3 bench/perop_factor.py "$DJ/perop-rowwarp-bfloat16.json" cupy_rowwarp --less 1 "$s" || true
}
proof_pdl() {  # linear@Q4_K=cupy_rowwarp_pdl and the triggering norms (session 16, not yet on a GPU when written): the
  # driver structures, the bits eagerly, at odd shapes and from graphs replayed with NaN-filled buffers (chains, and
  # each norm with its projection), the gate on CUDA, the norms' bits
  run gpu-tests-pdl 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      --timeout=$GPU_TEST_TIMEOUT tests/backends/test_cupy_pdl.py tests/backends/test_cupy_gate.py \
      tests/backends/test_triton_add_rmsnorm.py tests/backends/test_triton_gated_rmsnorm.py \
      tests/backends/test_cupy_timing.py -k "pdl or triggering or rowwarp_and_mma_moe_side_by_side" \
      --junitxml="$R/gpu-tests-pdl.xml"
  local rc=$?
  cp "$DJ"/perop-moe-*.json "$R/" 2> /dev/null
  return $rc
}
proof_rowhalf() {  # linear@Q4_K=cupy_rowhalf (session 15, not yet on a GPU when written): every row from NaN at the
  # 48B's and odd shapes, activations of any size, the contract on CUDA, then timed beside cupy_rowwarp (the row-warp
  # side-by-side's record, $DJ/perop-rowwarp-*.json, is the rung's prediction)
  run gpu-tests-rowhalf 150 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k "rowhalf or rowwarp_gemv_side_by_side or rowwarp_and_mma_moe_side_by_side" tests/backends/test_cupy_kernels.py \
      tests/backends/test_cupy_timing.py tests/backends/test_cupy_gate.py --junitxml="$R/gpu-tests-rowhalf.xml"
}
# decode_chain: the decode step of session 9 made again by swaps (each proven again on this machine) over the fused
# best, in the order its rungs were timed: the last-block reductions, the merged KDA convs, the MoE and router
# prefetch, cupy's bf16 attention, the Q6_K lm_head on cupy_float, fuse_low_rank. now_reg then picks the newest whose
# rung won (SUITE_TIMED names the rows of earlier sessions)
decode_chain() {
  [ -f $LB_REG ] || run swap-lastblock 40 bash -c 'swap_into "$@"' _ $LB_REG $FUSED_REG $LB_PAIRS
  if [ -f $LB_REG ] && [ ! -f $CONV_REG ]; then
    cp $LB_REG $CONV_REG.new && sparkops engine fuse_short_conv=on --registry $CONV_REG.new > /dev/null \
      && mv $CONV_REG.new $CONV_REG
  fi
  [ -f $CONV_REG ] && rebuild_over moe-prefetch $MOEPF_REG $CONV_REG moe_experts=triton_prefetch
  [ -f $MOEPF_REG ] && rebuild_over router-prefetch $ROUTPF_REG $MOEPF_REG moe_router=triton_prefetch
  [ -f $ROUTPF_REG ] && rebuild_over attn-cupy-now $ATTN_REG $ROUTPF_REG attention=cupy_splitk_bf16
  [ -f $ATTN_REG ] && rebuild_over lmhead-cupy-float $CUHEAD_REG $ATTN_REG linear@Q6_K=cupy_float
  if [ -f $CUHEAD_REG ] && [ ! -f $LOWRANK_REG ]; then
    cp $CUHEAD_REG $LOWRANK_REG.new && sparkops engine fuse_low_rank=on --registry $LOWRANK_REG.new > /dev/null \
      && mv $LOWRANK_REG.new $LOWRANK_REG && echo "$CUHEAD_REG" > $LOWRANK_REG.base
  fi
  return 0
}
proof_mma() {  # linear@Q4_K=cupy_mma (session 13, not yet on a GPU when written): every row from NaN against the
  # bf16-rounded reference, the contract on CUDA, then timed beside cupy_rowwarp and triton_lastblock (its record,
  # $DJ/perop-mma-*.json and perop-moe-*.json, is the rungs' prediction)
  run gpu-tests-mma 60 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k "mma" tests/backends/test_cupy_kernels.py tests/backends/test_cupy_timing.py tests/backends/test_cupy_gate.py \
      --junitxml="$R/gpu-tests-mma.xml"
}
proof_floatrow() {  # linear@F16=cupy_floatrow (session 13, not yet on a GPU when written): every row from NaN, then
  # timed beside triton_lastblock at the 48B's F16 shapes; the timing's record ($DJ/perop-floatrow-*.json) is the
  # rung's prediction
  run gpu-tests-floatrow 60 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      -k floatrow tests/backends/test_cupy_kernels.py tests/backends/test_cupy_timing.py \
      --junitxml="$R/gpu-tests-floatrow.xml"
}
proof_dqmm() {  # linear / moe_experts = triton_dqmm (session 9): the bf16 decode of every GGUF type, then the GEMMs
  run gpu-tests-dqmm 150 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k "dqmm or dequantize" \
      tests/backends/test_triton_dequantize.py tests/backends/test_triton_linear.py tests/backends/test_triton_moe.py \
      --junitxml="$R/gpu-tests-dqmm.xml"
}
proof_flat() {
  run gpu-tests-flat 60 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k flat tests/backends/test_triton_linear.py \
      tests/backends/test_triton_moe.py --junitxml="$R/gpu-tests-flat.xml"
  run tune-flat 45 python3 -m sparkops_triton._tune linear_gemv_flat moe_decode_flat
}

# the first prefill diagnosis (session 9): where a 4096-token chunk's time goes, per op, under the prefill registry,
# from an empty cache and at 28672 rows (the contexts filled like prefill_lean's); stage prefill_lean runs it, stage
# rungs9 where it is missing (the chunk's time before the dqmm rung, beside the diagnosis after)
# session 10: the chunk diagnosis at 16384 tokens (the rungs10 pair's chunk) of the prefill registry now
diagnose_prefill16k() {
  run diagnose-prefill-16k 60 sparkops diagnose --model $M --device cuda --depth 0 --prefill-chunk 16384 \
      --registry "$1" $FILL_LEAN --out "$R/diag-prefill-16k" --json-out $DJ/diag-prefill-16k.json
}
proof_sdpa() {
  run gpu-tests-sdpa 90 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k "prefill or contract or exact" \
      tests/backends/test_triton_attention.py --junitxml="$R/gpu-tests-sdpa.xml"
}
proof_moefused() {
  run gpu-tests-moefused 90 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k "dqmm_fused" \
      tests/backends/test_triton_moe.py --junitxml="$R/gpu-tests-moefused.xml"
}
# the launch-shape studies of the prefill chunk's slow kernels (session 10's diagnosis at 16384: KDA's prepare kernel
# 136 ms, flash attention 109, the router's logits GEMM 38, the whole-weight decodes ~48): the table that picks their
# defaults
tune_prefill() {
  run tune-prefill 200 python3 -m sparkops_triton._tune router_prefill dequant_bf16 attention_prefill kda_prefill \
      kda_prefill_split attention_prefill_sdpa
}
# the GPU tests of the kernels whose launch defaults session 11 changed (router GEMM, bf16 decode, flash tile, KDA
# prepare); the KDA and attention ones are proof_kdasplit's and proof_sdpa's
proof_tuned() {
  run gpu-tests-tuned 90 python3 -m pytest -q -rP -m gpu -p no:cacheprovider tests/backends/test_triton_moe_router.py \
      tests/backends/test_triton_dequantize.py --junitxml="$R/gpu-tests-tuned.xml"
}
# split_rung_32k BASE: kda=triton_chunked_split (no longer claimed bit-identical: compiled, it is not) over BASE in one
# forward of 32768, predicted from BASE's 32768 diagnosis; its GPU tests first
# prefill_now_fused: PNOW = the prefill registry now, rebuilt by swaps: rungs9's chain (run that stage first), then
# the fused MoE (session 11 timed it, 1.181x; its GPU tests run first unless SUITE_TIMED names its row)
prefill_now_fused() {
  PNOW=$PREFILL_REG
  timed prefill-dqmm && [ -f $DQMM_REG ] && PNOW=$DQMM_REG
  timed prefill-kda-chunked && [ -f $KDAC_REG ] && PNOW=$KDAC_REG
  [ -f $PNOW ] || { log "SKIP the rest of stage $stage: no prefill registry ($PNOW); run rungs9 first"; return 1; }
  if timed prefill-moe-fused; then
    earlier prefill-moe-fused || proof_moefused  # (timed in an earlier session: rebuilt, as the dqmm rung above)
    fresh_over $MOEFUSED_REG $PNOW
    { [ "$(marker $DONE/gpu-tests-moefused)" = 0 ] || earlier prefill-moe-fused; } && \
      [ ! -f $MOEFUSED_REG ] && \
      run swap-moe-fused 40 bash -c 'swap_into "$@"' _ $MOEFUSED_REG $PNOW moe_experts=triton_dqmm_fused
    [ -f $MOEFUSED_REG ] && PNOW=$MOEFUSED_REG
  fi
  log "the prefill registry now: $PNOW"
}
# kda_rung_32k DIAG TESTS NAME REG PAIR FACTOR WHAT: a KDA prefill rung over PNOW (prefill_chain's registry) in one
# forward of 32768: the base diagnosed at that shape (diag-prefill-DIAG-32k, the prediction), the rung's GPU tests
# (step gpu-tests-TESTS, run by proof_TESTS unless the lane beside ran them), PAIR swapped into REG over PNOW (step
# swap-NAME), then the pair (step prefill-NAME-32k), its expected per-op factor FACTOR (e.g. kda=1.18)
kda_rung_32k() {
  local diag=$DJ/diag-prefill-$1-32k.json tests=$2 name=$3 reg=$4 pair=$5 factor=$6 what=$7 ok
  run diagnose-prefill-$1-32k 90 sparkops diagnose --model $M --device cuda --depth 0 --prefill-chunk 32768 \
      --registry $PNOW $FILL_LEAN --out "$R/diag-prefill-$1-32k" --json-out $diag
  proof_$tests
  ok=$([ "$(marker $DONE/gpu-tests-$tests)" = 0 ] && echo 1)
  fresh_over $reg $PNOW
  [ -n "$ok" ] && [ ! -f $reg ] && run swap-$name 40 bash -c 'swap_into "$@"' _ $reg $PNOW $pair
  [ -n "$ok" ] && [ -f $reg ] && [ -s $diag ] && run prefill-$name-32k 110 sparkops bench prefill --model $M \
      --tokens 32768 --chunk 32768 --repeats 6 --registry $PNOW --vs $reg $GATE --changes kda --prediction $diag \
      --expect "$factor" --change "$pair: $what, over $(basename $PNOW)"
  return 0
}
# prefill_chain UNTIL: after prefill_now_fused, the rungs timed since (SUITE_TIMED names their rows, or they won on
# this machine) rebuilt by swaps in the order they were timed, each over the one before; stops at the first link
# not timed, or at the row UNTIL (the calling stage's own rung). PNOW = the last link made
PREFILL_CHAIN=(
  "prefill-kda-split-32k KSPLIT_REG kda=triton_chunked_split"
  "prefill-both-32k BOTH_REG attention=triton_sdpa"
  "prefill-kda-tf32-32k KTF32_REG kda=triton_chunked_split_tf32"
  "prefill-kda-bf16scratch-32k KBF16S_REG kda=triton_chunked_split_tf32_bf16scratch"
)
prefill_chain() {
  local link row var pair reg
  [ "$PNOW" = $MOEFUSED_REG ] || { log "the prefill registry now: $PNOW"; return 0; }
  for link in "${PREFILL_CHAIN[@]}"; do
    read -r row var pair <<< "$link"
    [ "$row" = "$1" ] && break
    timed "$row" || break
    reg=${!var}
    rebuild_over "${row#prefill-}" "$reg" "$PNOW" "$pair" || break
    PNOW=$reg
  done
  log "the prefill registry now: $PNOW"
}
# the GPU tests of kda=triton_chunked_split_tf32_bf16scratch (and its siblings': contract cases on CUDA, each form's
# distance from the one before, timed, the kernels one by one)
proof_kdabf16s() {
  run gpu-tests-kdabf16s 90 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k "split or contract or one_by_one" \
      tests/backends/test_triton_kda.py --junitxml="$R/gpu-tests-kdabf16s.xml"
}
# rebuild_over NAME REGISTRY BASE PAIR: a rung an earlier call timed (SUITE_TIMED names it), its registry made again
# by swap over BASE (the swap re-checks the kernel against the reference on this machine; its GPU tests passed in
# the call that timed it). 1 if the registry could not be made
rebuild_over() {
  fresh_over "$2" "$3"
  [ -f "$2" ] || run "swap-$1" 40 bash -c 'swap_into "$@"' _ "$2" "$3" "$4"
  [ -f "$2" ]
}
# the GPU tests of kda=triton_chunked_split_tf32 (contract cases on CUDA, its distance from the split form and the
# split form's from the one kernel, each timed, the kernels one by one)
proof_kdatf32() {
  run gpu-tests-kdatf32 90 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k "split or contract or one_by_one" \
      tests/backends/test_triton_kda.py --junitxml="$R/gpu-tests-kdatf32.xml"
}
split_rung_32k() {
  proof_kdasplit
  local ok; ok=$([ "$(marker $DONE/gpu-tests-kdasplit)" = 0 ] && echo 1)
  fresh_over $KSPLIT_REG "$1"
  [ -n "$ok" ] && [ -f "$1" ] && [ ! -f $KSPLIT_REG ] && run swap-kda-split 40 bash -c 'swap_into "$@"' _ $KSPLIT_REG \
      "$1" kda=triton_chunked_split
  [ -n "$ok" ] && [ -f $KSPLIT_REG ] && [ -s $DJ/diag-prefill-32k.json ] && run prefill-kda-split-32k 110 sparkops \
      bench prefill --model $M --tokens 32768 --chunk 32768 --repeats 6 --registry "$1" --vs $KSPLIT_REG $GATE \
      --changes kda --prediction $DJ/diag-prefill-32k.json $KSPLIT_FULL_EXPECT \
      --change "kda=triton_chunked_split: the KDA prepare kernel's phases as four launches, over $(basename "$1")"
  return 0
}
# await_file FILE: wait for FILE, which another lane makes (a registry, a diagnosis); 1 if a minute of budget is all
# that is left first
await_file() {
  local waited=""
  while [ ! -s "$1" ]; do
    [ -z "$waited" ] && { log "waiting for $1 (the other lane makes it)"; waited=1; }
    (( $(left) > 60 )) || { log "SKIP the rest of stage $stage: $1 did not appear in time"; return 1; }
    sleep 5
  done
}
proof_kdasplit() {
  run gpu-tests-kdasplit 60 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k "split or contract" \
      tests/backends/test_triton_kda.py --junitxml="$R/gpu-tests-kdasplit.xml"
}
# kda's per-op speed-up for the split rung's prediction: the split/one time ratio its GPU test printed at T=16384
# (the rung's chunk), inverted, into KSPLIT_EXPECT; none printed: KSPLIT_EXPECT keeps its estimate
kdasplit_expect() {
  local ratio measured
  ratio=$(grep -ohE "kda prefill T=16384 per layer: .*split/one [0-9.]+" "$R"/gpu-tests-kdasplit.log \
    "$TMP"/suite-results/*/gpu-tests-kdasplit.log 2>/dev/null | grep -oE "[0-9.]+\)?$" | tr -d ')' | head -1)
  [ -n "$ratio" ] && measured=$(python3 -c "print(f'--expect kda={1 / float(\"$ratio\"):.2f}')" 2>/dev/null)
  [ -n "${measured:-}" ] && KSPLIT_EXPECT=$measured
  return 0
}
# earlier NAME: the rung was timed in an earlier session (SUITE_TIMED), so what only predicts it is not needed either
earlier() { [[ " ${SUITE_TIMED:-} " == *" $1 "* ]]; }

diagnose_prefill() {
  run diagnose-prefill 60 sparkops diagnose --model $M --device cuda --depth 0,28672 --prefill-chunk 4096 \
      --registry $PREFILL_REG $FILL_LEAN --out "$R/diag-prefill" --json-out $DJ/diag-prefill.json
}

# env's argument for a run on every GPU of the machine with this lane's (CUDA_VISIBLE_DEVICES=N) first:
# CUDA_VISIBLE_DEVICES=N,others; without a lane or a GPU listing, -u CUDA_VISIBLE_DEVICES (all, in order)
lane_gpus_first() {
  local n own=${CUDA_VISIBLE_DEVICES:-} i all
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); all=$own
  for ((i = 0; i < n; i++)); do [ "$i" = "$own" ] || all=${all:+$all,}$i; done
  if [ -n "$own" ] && [ -n "$all" ]; then echo "CUDA_VISIBLE_DEVICES=$all"; else echo "-u CUDA_VISIBLE_DEVICES"; fi
}

# SUITE_TIMED names winners only: bench/timed_check.py reads the checkout's ledger and this machine's, and a rung of
# NOW_RUNGS it names whose newest pair did not win stops the call before anything runs (session 27's second call
# named a rung that had lost in its first, and timed the next rung over the losing registry)
check_timed() {
  local pairs=() pair var
  for pair in "${NOW_RUNGS[@]}"; do var=${pair#*=}; pairs+=("${pair%%=*}=${!var}"); done
  python3 bench/timed_check.py --timed "${SUITE_TIMED:-}" --ledger bench/ledger.jsonl --ledger "$B/ledger.jsonl" \
      "${pairs[@]}"
}
if [ $# -gt 0 ] && [ -n "${SUITE_TIMED:-}" ]; then
  if ! said=$(check_timed 2>&1); then log "$said"; exit 2; fi
  [ -n "$said" ] && log "$said"
fi
CALL_STAGES=" $* "  # this call's stages, each between spaces (rungs23 runs rungs24's proof when both are named)
for stage in "$@"; do case $stage in
install)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $TMP/site .whl/*.whl \
    || { log "wheel install failed"; exit 1; }
  # the kernel caches of the last session (pack_kernels), once a machine: a damaged archive only costs the compiles
  if [ -f "$KCACHE_FILE" ] && [ ! -d "$KCACHE_TRITON" ] && [ ! -d "$KCACHE_CUPY" ]; then
    if tar xzf "$KCACHE_FILE" -C / 2> "$R/kcache.log"; then
      log "kernel caches restored from $KCACHE_FILE: $(find "$KCACHE_TRITON" "$KCACHE_CUPY" -type f 2>/dev/null \
| wc -l) files"
    else
      log "kernel caches: $KCACHE_FILE could not be unpacked (kcache.log); every kernel compiles cold"
      rm -rf "$KCACHE_TRITON" "$KCACHE_CUPY"
    fi
  fi
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$R/install.log" 2>&1 \
    || { log "sparkops install failed"; cat "$R/install.log"; exit 1; }
  # the last session's registries (pack_registries), on a machine that has made none: each kept only where its plan
  # holds on cuda today. --mend: a selection whose record went stale (a kernel edited since) is proven again, once an
  # implementation for all of them, as its swap would; a registry with any other problem, or a failed proof, is
  # dropped and made again by its swaps
  if [ -f "$RCACHE_FILE" ] && ! ls "$TMP"/cuda-*.toml > /dev/null 2>&1; then
    if tar xzf "$RCACHE_FILE" -C "$TMP" 2> "$R/rcache.log"; then
      if python3 bench/registry_keep.py --device cuda --mend "$TMP"/cuda-*.toml > "$R/registry_keep.log" 2>&1; then
        log "registries restored from $RCACHE_FILE: $(tail -n 1 "$R/registry_keep.log") (registry_keep.log)"
      else
        log "registries: their plans could not be checked (registry_keep.log); they are made by their swaps"
        rm -f "$TMP"/cuda-*.toml "$TMP"/cuda-*.toml.base
      fi
    else
      log "registries: $RCACHE_FILE could not be unpacked (rcache.log); they are made by their swaps"
      rm -f "$TMP"/cuda-*.toml "$TMP"/cuda-*.toml.base
    fi
  fi
  nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv | tee -a "$OUT/suite.log"
  nvidia-smi topo -m 2>/dev/null | head -4 | tee -a "$OUT/suite.log"
  python3 -c "import torch, triton, cupy; print(torch.__version__, triton.__version__, cupy.__version__)" | tee -a "$OUT/suite.log"
  git log --oneline -1 | tee -a "$OUT/suite.log"
  [ -f "$B/ledger.jsonl" ] || cp bench/ledger.jsonl bench/frontier.toml bench/goals.toml "$B/"
  sparkops plugins > "$R/plugins.txt" 2>&1
  ;;
registries|synth) prereq || continue ;;
generate)
  prereq || continue
  run generate48-torch 60 sparkops generate --model $M --device cuda -n 16 --registry $TORCH_REG
  run generate48-fast-graph 60 sparkops generate --model $M --device cuda -n 64 --registry $FAST_REG --graph
  ;;
gate)
  prereq || continue
  # every CUDA implementation the registries stage did not prove (session 2 proved all 43; this re-proves the rest)
  run gate-others 60 sparkops check linear=torch_bf16 linear=triton kda=torch_recurrent kda=torch_chunked \
      kda=triton_chunked kda=cupy_recurrent attention=torch_bf16 attention=triton attention=triton_splitk attention=triton_fp32 \
      attention=cupy_splitk_bf16 rmsnorm=cupy linear=cupy_dp4a quantize_act=cupy rmsnorm_quantize=cupy \
      rmsnorm_quantize=cupy_unfused moe_experts=torch_bf16 moe_experts=triton moe_experts=cupy_dp4a \
      --device cuda --json-out "$R/gate-others.json"
  run gate-captured-fast 30 sparkops check --model k3-nano --registry $FAST_REG --device cuda --captured
  run gate-captured-bf16 30 sparkops check --model k3-nano --registry $BF16_REG --device cuda --captured
  ;;
gate48)
  prereq || continue
  # the 48B gates the bench runs itself anyway; here for the write-up, when time allows (routing pinned, and
  # for comparison the float32 registry free-running at 4096, which failed in session 3)
  run gate48-fast 60 sparkops check --model $M --registry $FAST_REG --golden-registry $TORCH_REG --device cuda \
      --depths 1,64,4096 --json-out "$R/gate48-fast.json"
  run gate48-fast-free 60 sparkops check --model $M --registry $FAST_REG --golden-registry $TORCH_REG --device cuda \
      --depths 4096 --free-routing
  # a bf16 MLA cache under float32 activations (half the cache bytes at depth)
  run gate48-fast-bf16cache 45 sparkops check --model $M --registry $FAST_REG --golden-registry $TORCH_REG \
      --device cuda --depths 1,64,4096 --cache-dtype bfloat16
  ;;
ladder|diagnoses)
  prereq || continue
  # diagnose the baseline first: its binding ceiling and predicted gain go into the rows of the change
  # ("diagnoses": the two diagnoses alone, for a machine whose ledger already holds the decode pair)
  run diagnose-torch 90 sparkops diagnose --model $M --device cuda --depth 0,4096,32768 --registry $TORCH_REG \
      --fill-registry $FILL_REG --steps 4 --out "$R/diag-torch" --json-out $DJ/diag-torch.json --record --bench-dir $B
  [ -s $DJ/diag-torch.json ] && PRED_TORCH="--prediction $DJ/diag-torch.json"
  # the baseline and the best gated registry, ABAB at each depth: torch eager (A) vs best + one CUDA graph per step (B)
  [ $stage = ladder ] && run decode-torch-vs-best 200 sparkops bench decode --model $M --depth 0,4096,32768 --tokens 16 --repeats 6 \
      --registry $TORCH_REG --vs $BEST_REG --graph B $GATE $FILL $PRED_TORCH \
      --change "$(best_is) + the decode step as one CUDA graph, vs torch eager"
  run diagnose 90 sparkops diagnose --model $M --device cuda --depth 0,4096,32768 --registry $BEST_REG \
      --fill-registry $FILL_REG --out "$R/diag-best" --json-out $DJ/diag-best.json --record --bench-dir $B
  ;;
prefill)
  prereq || continue
  # where a prefill chunk's time goes, per op, before the pair is timed (from an empty cache and at a fill's depth)
  run diagnose-prefill 60 sparkops diagnose --model $M --device cuda --depth 0,28672 --prefill-chunk 4096 \
      --registry $PREFILL_REG --fill-registry $FILL_REG --out "$R/diag-prefill" --json-out $DJ/diag-prefill.json
  run prefill-32k 240 sparkops bench prefill --model $M --tokens 32768 --chunk 4096 --repeats 2 \
      --registry $TORCH_REG --vs $PREFILL_REG $GATE --change "$(cat "$TMP/prefill-kind" 2>/dev/null || best_is), for prefill"
  ;;
ladder131k)
  prereq || continue
  run decode131k 240 sparkops bench decode --model $M --depth 131072 --tokens 16 --repeats 6 --chunk 4096 \
      --registry $TORCH_REG --vs $BEST_REG --graph B $GATE $FILL \
      --change "$(best_is) + the decode step as one CUDA graph, vs torch eager"
  run diagnose131k 90 sparkops diagnose --model $M --device cuda --depth 131072 --registry $BEST_REG \
      --fill-registry $FILL_REG --out "$R/diag-best" --json-out $DJ/diag-best-131k.json --record --bench-dir $B
  ;;
rungs)
  prereq || continue
  # the ladder's single steps, each its own row. First the one session 5's figures point at: attention at depth
  # (23% of the bf16 step's busy time at 131072) with cupy's split-K, in the fused bf16 registry (session 5's best)
  # Its prediction: session 5's diagnoses of the bf16 registry (unfused; the attention op is the same kernel) and
  # the per-op speed-ups session 5 measured (decode T=1, bf16 cache: 0.241 -> 0.132 ms at L=32768, 0.154 -> 0.092
  # at 131072), turned into the step's gain by Amdahl
  S5=bench/gpu-runs/2026-11-29-session5
  [ -f $FUSED_CUPY_ATTN_REG ] && run decode-attn-cupy-bf16 400 sparkops bench decode --model $M --depth 32768,131072 \
      --tokens 64 --repeats 6 --chunk 4096 --registry $FUSED_REG --vs $FUSED_CUPY_ATTN_REG --graph A,B $GATE $FILL \
      --prediction $S5/diag-best.json --prediction $S5/diag-best-131k.json \
      --expect attention@32768=1.83,attention@131072=1.67 \
      --change "attention=cupy_splitk_bf16 vs triton_splitk (bf16 cache), fused bf16 registry, graph"
  [ -f $FUSED_CUPY_LINEAR_REG ] && run decode-linear-cupy 90 sparkops bench decode --model $M --depth 0 --tokens 64 \
      --repeats 6 --registry $FUSED_REG --vs $FUSED_CUPY_LINEAR_REG --graph A,B $GATE $FILL \
      --change "linear=cupy_dp4a (int8 activations, dp4a) vs triton (float32 FMA GEMV), fused bf16 registry, graph"
  # then torch eager -> fast eager -> fast graph
  run decode-torch-vs-fast 150 sparkops bench decode --model $M --depth 0,4096,32768 --tokens 16 --repeats 6 \
      --registry $TORCH_REG --vs $FAST_REG $GATE $FILL --change "float32 kernels (triton, cupy split-K attention), eager"
  run decode-fast-graph 120 sparkops bench decode --model $M --depth 0,4096,32768 --tokens 64 --repeats 6 \
      --registry $FAST_REG --vs $FAST_REG --graph B $GATE $FILL \
      --change "the whole decode step as one CUDA graph (float32 kernels)"
  [ -s $DJ/diag-best.json ] && PRED_BEST="--prediction $DJ/diag-best.json"
  run decode-fuse 120 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 \
      --registry $BEST_REG --vs $FUSED_REG --graph A,B $GATE $FILL $PRED_BEST \
      --change "fuse_projections: the linears that read one input run as one GEMV per GGUF type (best registry, graph)"
  run decode-attn-cupy-vs-triton 90 sparkops bench decode --model $M --depth 32768 --tokens 64 --repeats 6 \
      --registry $CUPY_ATTN_REG --vs $FAST_REG --graph A,B $GATE $FILL \
      --change "attention=triton_fp32 (16 heads per pass over the float32 cache) vs cupy_splitk (one head per block)"
  run decode-fast-vs-bf16 120 sparkops bench decode --model $M --depth 0,4096,32768 --tokens 64 --repeats 6 \
      --registry $FAST_REG --vs $BF16_REG --graph A,B $GATE $FILL \
      --change "bf16 Triton kernels (bf16 activations) vs float32 kernels, both one CUDA graph per step"
  run decode-bf16-cache 120 sparkops bench decode --model $M --depth 32768 --tokens 64 --repeats 6 \
      --registry $FAST_REG --vs $FAST_REG --graph A,B --cache-dtype A=float32,B=bfloat16 $GATE $FILL \
      --change "a bf16 MLA cache under float32 activations (fast, graph)"
  ;;
rungs6)
  prereq_lean || continue
  [ -f $FILL_REG ] && FILL_LEAN=$FILL
  # 1. the reductions by the last program to arrive: the split-K GEMV's combine, the MoE decode's combine and the
  # router's routing kernel fold into the launch before them (~216 of the 704 kernels of a token, session 5's
  # diagnosis), bit-identical to the two-launch chain; proven op by op (swap), on the GPU tests (bitwise vs the
  # old implementation, eager and replayed from a graph) and on k3-nano's captured step, then timed on the 48B
  [ -f $LB_REG ] || run swap-lastblock 40 bash -c 'swap_into "$@"' _ $LB_REG $FUSED_REG $LB_PAIRS
  run gpu-tests-rungs6 90 python3 -m pytest -q -rP -m gpu -p no:cacheprovider ${RUNGS6_TESTS:-tests/backends/test_triton_linear.py \
      tests/backends/test_triton_moe.py tests/backends/test_triton_moe_router.py} --junitxml="$R/gpu-tests-rungs6.xml"
  [ -f $LB_REG ] && run gate-captured-lastblock 30 sparkops check --model k3-nano --registry $LB_REG --device cuda --captured
  [ -f $LB_REG ] && run decode-lastblock 120 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 \
      --registry $FUSED_REG --vs $LB_REG --graph A,B $GATE $FILL_LEAN \
      --change "triton_lastblock: split-K, MoE and router reductions by the last program to arrive (one launch, not two), fused bf16 registry, graph"
  # 2. the KDA q/k/v short convolutions as one launch per layer over their stacked channels ([engine] fuse_short_conv)
  if [ -f $LB_REG ] && [ ! -f $CONV_REG ]; then
    cp $LB_REG $CONV_REG.new && sparkops engine fuse_short_conv=on --registry $CONV_REG.new > /dev/null \
      && mv $CONV_REG.new $CONV_REG
  fi
  [ -f $CONV_REG ] && run gate-captured-conv 30 sparkops check --model k3-nano --registry $CONV_REG --device cuda --captured
  [ -f $CONV_REG ] && run decode-convmerge 100 sparkops bench decode --model $M --depth 0 --tokens 64 --repeats 6 \
      --registry $LB_REG --vs $CONV_REG --graph A,B $GATE $FILL_LEAN \
      --change "fuse_short_conv: a KDA layer's q/k/v short convolutions as one launch (lastblock fused bf16 registry, graph)"
  # 2b. programmatic dependent launch (an experiment, linear=triton_pdl): each decode GEMV fetches its first weight
  # chunk while the kernel before it finishes, then griddepcontrol.wait (a small GEMV costs ~6 us whatever its
  # bytes: ramp-up and first-read latency, paid serially); bit-identical to triton_lastblock. Its GPU tests first
  # (bitwise vs triton_lastblock, chains of PDL GEMVs replayed from a graph, a 20-GEMV chain timed with and without
  # PDL); a failed test leaves the rung out
  [ -f $CONV_REG ] && [ ! -f $PDL_REG ] && run swap-pdl 30 bash -c 'swap_into "$@"' _ $PDL_REG $CONV_REG linear=triton_pdl
  [ -f $PDL_REG ] && run gpu-tests-pdl 45 python3 -m pytest -q -rP -m gpu -p no:cacheprovider -k pdl \
      tests/backends/test_triton_linear.py --junitxml="$R/gpu-tests-pdl.xml"
  [ -f $PDL_REG ] && [ "$(marker $DONE/gpu-tests-pdl)" = 0 ] && run decode-pdl 100 sparkops bench \
      decode --model $M --depth 0 --tokens 64 --repeats 6 --registry $CONV_REG --vs $PDL_REG --graph A,B $GATE $FILL_LEAN \
      --change "linear=triton_pdl: the decode GEMVs launched with programmatic dependent launch (lastblock conv fused bf16 registry, graph)"
  # 3. where the step stands now: kernels per token and the per-op split (recorded)
  NOW_REG=$(now_reg); log "the step now: $NOW_REG"
  run diagnose-now 60 sparkops diagnose --model $M --device cuda --depth 0 --registry $NOW_REG $FILL_LEAN \
      --out "$R/diag-now" --json-out $DJ/diag-now.json --record --bench-dir $B
  # 4. prefill 32768 under the best registry against the frontier (1112 tok/s, before the history fix of session 5)
  run prefill-best 150 sparkops bench prefill --model $M --tokens 32768 --chunk 4096 --repeats 2 --registry $PREFILL_REG \
      $GATE --change "$(cat "$TMP/prefill-kind" 2>/dev/null || best_is), for prefill, after the naive-form history (afd502a)"
  ;;
prefill_lean)  # prefill 32768 under the bf16 registry (the prefill paths), on the lean prerequisites
  prereq_lean || continue
  # where a 4096-token chunk's time goes, per op: from an empty cache and at 28672 rows
  diagnose_prefill
  run prefill-best 150 sparkops bench prefill --model $M --tokens 32768 --chunk 4096 --repeats 2 --registry $PREFILL_REG \
      $GATE --change "$(cat "$TMP/prefill-kind" 2>/dev/null || best_is), for prefill"
  ;;
proofs8)  # the rungs8 proof alone: the lane beside a rungs8 lane (bench/gpu_lanes.sh)
  proof_cupy_float ;;
rungs8)
  prereq_lean || continue
  [ -f $FILL_REG ] && FILL_LEAN=$FILL
  # session 8's step, made by swaps (each proven again on this machine) from the rungs that timed wins: lastblock,
  # the merged conv, the MoE prefetch, the router prefetch, cupy's bf16 attention (SUITE_TIMED names their rungs)
  [ -f $LB_REG ] || run swap-lastblock 40 bash -c 'swap_into "$@"' _ $LB_REG $FUSED_REG $LB_PAIRS
  if [ -f $LB_REG ] && [ ! -f $CONV_REG ]; then
    cp $LB_REG $CONV_REG.new && sparkops engine fuse_short_conv=on --registry $CONV_REG.new > /dev/null \
      && mv $CONV_REG.new $CONV_REG
  fi
  [ -f $CONV_REG ] && [ ! -f $MOEPF_REG ] && run swap-moe-prefetch 30 bash -c 'swap_into "$@"' _ \
      $MOEPF_REG $CONV_REG moe_experts=triton_prefetch
  [ -f $MOEPF_REG ] && [ ! -f $ROUTPF_REG ] && run swap-router-prefetch 30 bash -c 'swap_into "$@"' _ \
      $ROUTPF_REG $MOEPF_REG moe_router=triton_prefetch
  [ -f $ROUTPF_REG ] && [ ! -f $ATTN_REG ] && run swap-attn-cupy-now 20 bash -c 'swap_into "$@"' _ \
      $ATTN_REG $ROUTPF_REG attention=cupy_splitk_bf16
  [ -f $ATTN_REG ] && run decode-attn-cupy-now 140 sparkops bench decode --model $M --depth 0,32768 --tokens 64 \
      --repeats 6 --registry $ROUTPF_REG --vs $ATTN_REG --graph A,B $GATE $FILL_LEAN --changes attention \
      --change "attention=cupy_splitk_bf16 vs triton_splitk (bf16 cache) at 0 and 32768, router prefetch registry, graph"
  # linear=cupy_float (session 8, not yet on a GPU when written): the Q6_K lm_head took 349 us in Triton (22% of the
  # read ceiling, 12% of the step); cupy's integer kernel streamed it at 126 us (session 4) but its Q8_0 activations
  # were refused by the 48B gate. The float kernel keeps that weight stream with float activations. First for the
  # lm_head's type alone (a per-type selection, linear@Q6_K: every Q4_K projection stays on Triton), then for every
  # type over the step that makes, so that each row times one change
  proof_cupy_float
  CF_OK=$({ [ "$(marker $DONE/gpu-tests-cupy-float)" = 0 ] || \
    [[ " ${SUITE_TESTS_PASSED:-} " == *" gpu-tests-cupy-float "* ]]; } && echo 1)
  CH_BASE=$(now_reg decode-lmhead-cupy-float)
  fresh_over $CUHEAD_REG $CH_BASE
  [ -n "$CF_OK" ] && [ ! -f $CUHEAD_REG ] && run swap-lmhead-cupy-float 30 bash -c 'swap_into "$@"' _ $CUHEAD_REG \
      $CH_BASE linear@Q6_K=cupy_float
  [ -n "$CF_OK" ] && [ -f $CUHEAD_REG ] && run decode-lmhead-cupy-float 140 sparkops bench decode --model $M \
      --depth 0,32768 --tokens 64 --repeats 6 --registry $CH_BASE --vs $CUHEAD_REG --graph A,B $GATE $FILL_LEAN \
      --changes linear@Q6_K \
      --change "linear@Q6_K=cupy_float: the Q6_K lm_head through cupy's streamed GEMV with float activations, over $(basename $CH_BASE), graph"
  CF_BASE=$(now_reg decode-linear-cupy-float)
  fresh_over $CUFLOAT_REG $CF_BASE
  [ -n "$CF_OK" ] && [ ! -f $CUFLOAT_REG ] && run swap-linear-cupy-float 30 bash -c 'swap_into "$@"' _ $CUFLOAT_REG \
      $CF_BASE linear=cupy_float
  [ -n "$CF_OK" ] && [ -f $CUFLOAT_REG ] && run decode-linear-cupy-float 140 sparkops bench decode --model $M \
      --depth 0,32768 --tokens 64 --repeats 6 --registry $CF_BASE --vs $CUFLOAT_REG --graph A,B $GATE $FILL_LEAN \
      --changes linear \
      --change "linear=cupy_float: every linear through cupy's streamed GEMV with float activations, over $(basename $CF_BASE), graph"
  # a KDA layer's two low-rank up-projections (f_b, g_b: [4096, 128] F16 each, ~4 us a launch for 1 MB) as one
  # block-diagonal linear ([engine] fuse_low_rank, session 8, not yet on a GPU when written): 20 launches fewer a
  # token for 40 MB of zeros read; predicted ~2% from the launch count (per-op figures not taken)
  LR_BASE=$(now_reg decode-fuse-lowrank)
  fresh_over $LOWRANK_REG $LR_BASE
  if [ ! -f $LOWRANK_REG ] && [ -f $LR_BASE ]; then
    cp $LR_BASE $LOWRANK_REG.new && sparkops engine fuse_low_rank=on --registry $LOWRANK_REG.new > /dev/null \
      && mv $LOWRANK_REG.new $LOWRANK_REG && echo "$LR_BASE" > $LOWRANK_REG.base
  fi
  [ -f $LOWRANK_REG ] && run gate-captured-lowrank 30 sparkops check --model k3-nano --registry $LOWRANK_REG --device cuda \
      --captured
  [ -f $LOWRANK_REG ] && run decode-fuse-lowrank 100 sparkops bench decode --model $M --depth 0 --tokens 64 \
      --repeats 6 --registry $LR_BASE --vs $LOWRANK_REG --graph A,B $GATE $FILL_LEAN --changes engine \
      --change "fuse_low_rank: a KDA layer's f_b and g_b as one block-diagonal linear, over $(basename $LR_BASE), graph"
  NOW_REG=$(now_reg); log "the step now: $NOW_REG"
  [ -f $NOW_REG ] && run gate-captured-now8 30 sparkops check --model k3-nano --registry $NOW_REG --device cuda --captured
  run diagnose-now8 60 sparkops diagnose --model $M --device cuda --depth 0 --registry $NOW_REG $FILL_LEAN \
      --out "$R/diag-now8" --json-out $DJ/diag-now8.json --record --bench-dir $B
  ;;
proofs9)  # the rungs9 proof alone: the lane beside a rungs9 lane (bench/gpu_lanes.sh)
  proof_dqmm ;;
prefill_diag)  # the chunk diagnosis rungs9's first rung is predicted from, alone: in the lane beside rungs9, so that
  # it runs while that lane swaps dqmm (run() lets rungs9 wait for it, or finds it done)
  prereq_lean || continue
  diagnose_prefill ;;
rungs9)
  prereq_lean || continue
  # session 9's prefill diagnosis ($DJ/diag-prefill.json, stage prefill_lean): the linears and experts took 883 ms
  # of a 4096-token chunk's 1153 (moe_experts 502, linear 381), at 3.3% of the matmul ceiling. triton_dqmm (session
  # 9, not yet on a GPU when written) decodes each GGUF weight once to bf16 and multiplies on cuBLAS /
  # torch._grouped_mm; its decode paths are lastblock's / prefetch's GEMVs. Its GPU tests first (proofs9 runs them in
  # the lane beside); a failed test leaves the rung out
  # (a rung an earlier session timed is only rebuilt: its swap re-checks the kernels against the reference on this
  # machine, and its GPU tests ran in that session and run in the test halves; ~57 s a fresh machine saved)
  earlier prefill-dqmm && log "gpu-tests-dqmm: not run first, the rung was timed in an earlier session (SUITE_TIMED)" \
    || proof_dqmm
  DQ_OK=$({ [ "$(marker $DONE/gpu-tests-dqmm)" = 0 ] || earlier prefill-dqmm || \
    [[ " ${SUITE_TESTS_PASSED:-} " == *" gpu-tests-dqmm "* ]]; } && echo 1)
  fresh_over $DQMM_REG $PREFILL_REG
  [ -n "$DQ_OK" ] && [ -f $PREFILL_REG ] && [ ! -f $DQMM_REG ] && run swap-dqmm 40 bash -c 'swap_into "$@"' _ \
      $DQMM_REG $PREFILL_REG linear=triton_dqmm moe_experts=triton_dqmm
  if [ -n "$DQ_OK" ] && [ -f $DQMM_REG ]; then
    # the chunk's time per op before the change, where this machine has none yet (stage prefill_lean's diagnosis)
    [ -s $DJ/diag-prefill.json ] || earlier prefill-dqmm || diagnose_prefill
    # the pair, ABAB. 6 pairs: fewer can never pass bench's sign test (2 give the tier "none" whatever the ratio,
    # and the chunk study below waits for a win). The prediction: the chunk diagnosis of A, with the per-op
    # factors estimated from bytes and FLOPs (not yet measured per op: the GPU tests above print them): linear
    # 381 -> ~40 ms a chunk (x9.5: a weight's decode ~10 us, its bf16 GEMM at ~60% of the ceiling), moe_experts
    # 502 -> ~80 ms (x6.3: 3.6 GB of bf16 experts written and read a layer, 464 GFLOP at ~50%)
    # (a rung is not timed without its baseline's diagnosis: the ladder diagnoses before each step)
    [ -s $DJ/diag-prefill.json ] || earlier prefill-dqmm || \
      log "SKIP prefill-dqmm: no diagnosis of its baseline ($DJ/diag-prefill.json)"
    { [ -s $DJ/diag-prefill.json ] || earlier prefill-dqmm; } && run prefill-dqmm 240 sparkops bench prefill --model $M --tokens 32768 --chunk 4096 \
        --repeats 6 --registry $PREFILL_REG --vs $DQMM_REG $GATE --changes linear,moe_experts \
        --prediction $DJ/diag-prefill.json $DQMM_EXPECT \
        --change "linear,moe_experts=triton_dqmm: prefill decodes each weight once to bf16, then cuBLAS / grouped GEMM, over $(basename $PREFILL_REG)"
    # where the chunk's time goes after it (the next rung's prediction, unless that was timed earlier too)
    earlier prefill-kda-chunked || run diagnose-prefill-dqmm 60 sparkops diagnose --model $M --device cuda --depth 0 --prefill-chunk 4096 \
        --registry $DQMM_REG $FILL_LEAN --out "$R/diag-prefill-dqmm" --json-out $DJ/diag-prefill-dqmm.json
  fi
  # kda=triton_chunked for prefill. Session 9's diagnosis: kda took 163 ms of the chunk, 20 calls of 8.1 ms, because
  # the prefill registry runs the recurrent kernel token after token. The chunked kernel took 2.38 ms a layer at
  # T=4096 (session 1) and passed its op check on the H200 (session 2), but no registry had selected it. Its calls of
  # fewer than 16 tokens (decode) run the same recurrent kernel, so decode is unchanged. Over the dqmm registry when
  # that rung won; after the dqmm rung ran (or could not), so that its base does not move under it
  if [ -f $DONE/prefill-dqmm ] || [ -z "$DQ_OK" ] || earlier prefill-dqmm; then
    PK_BASE=$PREFILL_REG
    timed prefill-dqmm && [ -f $DQMM_REG ] && PK_BASE=$DQMM_REG
    fresh_over $KDAC_REG $PK_BASE
    [ -f $PK_BASE ] && [ ! -f $KDAC_REG ] && run swap-kda-chunked 40 bash -c 'swap_into "$@"' _ $KDAC_REG $PK_BASE \
        kda=triton_chunked
    # predicted from the base's chunk diagnosis: kda 8.13 -> 2.38 ms a call (x3.4: session 9's recurrent calls in
    # the chunk against session 1's chunked kernel at T=4096)
    PK_DIAG=$DJ/diag-prefill.json; [ "$PK_BASE" = "$DQMM_REG" ] && PK_DIAG=$DJ/diag-prefill-dqmm.json
    earlier prefill-kda-chunked || { [ "$PK_BASE" = "$PREFILL_REG" ] && [ ! -s $PK_DIAG ] && diagnose_prefill; }
    [ -f $KDAC_REG ] && [ ! -s $PK_DIAG ] && ! earlier prefill-kda-chunked && \
      log "SKIP prefill-kda-chunked: no diagnosis of its baseline ($PK_DIAG)"
    [ -f $KDAC_REG ] && { [ -s $PK_DIAG ] || earlier prefill-kda-chunked; } && run prefill-kda-chunked 240 sparkops bench prefill --model $M --tokens 32768 \
        --chunk 4096 --repeats 6 --registry $PK_BASE --vs $KDAC_REG $GATE --changes kda --prediction $PK_DIAG $KDAC_EXPECT \
        --change "kda=triton_chunked for prefill (decode keeps the recurrent kernel), over $(basename $PK_BASE)"
  fi
  # the newest prefill registry whose rung won: larger chunks (fewer weight decodes per token), one arm against the
  # frontier
  PNOW=""
  timed prefill-dqmm && [ -f $DQMM_REG ] && PNOW=$DQMM_REG
  timed prefill-kda-chunked && [ -f $KDAC_REG ] && PNOW=$KDAC_REG
  [ -n "$PNOW" ] && run prefill-chunk16k 150 sparkops bench prefill --model $M --tokens 32768 \
      --chunk 16384 --repeats 2 --registry $PNOW $GATE \
      --change "$(basename $PNOW) prefill in chunks of 16384 (one arm, against the frontier)"
  ;;
proofs10)  # the rungs10 proofs and the prefill tune studies: the lane beside a rungs10 lane (no prerequisites)
  proof_moefused; proof_sdpa; proof_kdasplit; tune_prefill ;;
rungs10)
  prereq_lean || continue
  # the prefill registry now: rungs9's chain (run that stage first: its swaps rebuild it; SUITE_TIMED keeps the
  # session 10 rows from being timed again)
  PNOW=$PREFILL_REG
  timed prefill-dqmm && [ -f $DQMM_REG ] && PNOW=$DQMM_REG
  timed prefill-kda-chunked && [ -f $KDAC_REG ] && PNOW=$KDAC_REG
  [ -f $PNOW ] || { log "SKIP the rest of stage rungs10: no prefill registry ($PNOW); run rungs9 first"; continue; }
  log "the prefill registry now: $PNOW"
  # moe_experts=triton_dqmm_fused (session 10, not yet on a GPU when written): the dqmm prefill whose gate and up are
  # one grouped GEMM and whose element-wise steps are two kernels. Its GPU tests first (proofs10 runs them beside)
  proof_moefused
  MF_OK=$([ "$(marker $DONE/gpu-tests-moefused)" = 0 ] && echo 1)
  fresh_over $MOEFUSED_REG $PNOW
  [ -n "$MF_OK" ] && [ ! -f $MOEFUSED_REG ] && run swap-moe-fused 40 bash -c 'swap_into "$@"' _ $MOEFUSED_REG $PNOW \
      moe_experts=triton_dqmm_fused
  [ -s $DJ/diag-prefill-16k.json ] || diagnose_prefill16k $PNOW
  if [ -n "$MF_OK" ] && [ -f $MOEFUSED_REG ] && [ -s $DJ/diag-prefill-16k.json ]; then
    run prefill-moe-fused 200 sparkops bench prefill --model $M --tokens 32768 --chunk 16384 --repeats 6 \
        --registry $PNOW --vs $MOEFUSED_REG $GATE --changes moe_experts --prediction $DJ/diag-prefill-16k.json \
        $MOEFUSED_EXPECT --change "moe_experts=triton_dqmm_fused: the MoE prefill's gate+up one grouped GEMM, its \
element-wise steps two kernels, over $(basename $PNOW)"
    run diagnose-prefill-moefused 60 sparkops diagnose --model $M --device cuda --depth 0 --prefill-chunk 16384 \
        --registry $MOEFUSED_REG $FILL_LEAN --out "$R/diag-prefill-moefused" --json-out $DJ/diag-prefill-moefused.json
  fi
  # attention=triton_sdpa (session 10, not yet on a GPU when written): prefill calls on torch's fused attention, over
  # the newest winner, after the fused-MoE rung ran (or could not), so that its base does not move under it; predicted
  # on its base's 16384-token chunk diagnosis
  if [ -f $DONE/prefill-moe-fused ] || [ -z "$MF_OK" ] || earlier prefill-moe-fused; then
    SD_BASE=$PNOW SD_DIAG=$DJ/diag-prefill-16k.json
    timed prefill-moe-fused && [ -f $MOEFUSED_REG ] && SD_BASE=$MOEFUSED_REG SD_DIAG=$DJ/diag-prefill-moefused.json
    proof_sdpa
    SD_OK=$([ "$(marker $DONE/gpu-tests-sdpa)" = 0 ] && echo 1)
    fresh_over $SDPA_REG $SD_BASE
    [ -n "$SD_OK" ] && [ ! -f $SDPA_REG ] && run swap-sdpa 40 bash -c 'swap_into "$@"' _ $SDPA_REG $SD_BASE \
        attention=triton_sdpa
    [ -n "$SD_OK" ] && [ -f $SDPA_REG ] && [ ! -s $SD_DIAG ] && log "SKIP prefill-sdpa: no diagnosis of its base ($SD_DIAG)"
    [ -n "$SD_OK" ] && [ -f $SDPA_REG ] && [ -s $SD_DIAG ] && run prefill-sdpa 200 sparkops bench prefill --model $M \
        --tokens 32768 --chunk 16384 --repeats 6 --registry $SD_BASE --vs $SDPA_REG $GATE --changes attention \
        --prediction $SD_DIAG $SDPA_EXPECT \
        --change "attention=triton_sdpa: prefill on torch's fused attention (naive form), over $(basename $SD_BASE)"
  fi
  # kda=triton_chunked_split (session 10, not yet on a GPU when written): the prepare kernel's phases as four
  # launches over 4x the programs, claimed bit-identical; over the newest winner, after the SDPA rung ran (or could
  # not); predicted from its GPU test's per-layer ratio at T=16384 on its base's diagnosis
  if [ -f $DONE/prefill-sdpa ] || [ -z "${SD_OK:-}" ] || earlier prefill-sdpa; then
    KS_BASE=$PNOW KS_DIAG=$DJ/diag-prefill-16k.json
    timed prefill-moe-fused && [ -f $MOEFUSED_REG ] && KS_BASE=$MOEFUSED_REG KS_DIAG=$DJ/diag-prefill-moefused.json
    timed prefill-sdpa && [ -f $SDPA_REG ] && KS_BASE=$SDPA_REG KS_DIAG=$DJ/diag-prefill-sdpa.json
    proof_kdasplit
    KS_OK=$([ "$(marker $DONE/gpu-tests-kdasplit)" = 0 ] && echo 1)
    fresh_over $KSPLIT_REG $KS_BASE
    [ -n "$KS_OK" ] && [ ! -f $KSPLIT_REG ] && run swap-kda-split 40 bash -c 'swap_into "$@"' _ $KSPLIT_REG $KS_BASE \
        kda=triton_chunked_split
    [ -n "$KS_OK" ] && [ -f $KSPLIT_REG ] && [ ! -s $KS_DIAG ] && run diagnose-prefill-kdabase 60 sparkops diagnose \
        --model $M --device cuda --depth 0 --prefill-chunk 16384 --registry $KS_BASE $FILL_LEAN \
        --out "$R/diag-prefill-kdabase" --json-out $KS_DIAG
    kdasplit_expect
    [ -n "$KS_OK" ] && [ -f $KSPLIT_REG ] && [ -s $KS_DIAG ] && run prefill-kda-split 200 sparkops bench prefill \
        --model $M --tokens 32768 --chunk 16384 --repeats 6 --registry $KS_BASE --vs $KSPLIT_REG $GATE --changes kda \
        --prediction $KS_DIAG $KSPLIT_EXPECT \
        --change "kda=triton_chunked_split: the KDA prepare kernel's phases as four launches, over $(basename $KS_BASE)"
  fi
  # the newest winner in one forward of the whole prompt (the frontier's chunk), one arm
  P32=""
  timed prefill-moe-fused && [ -f $MOEFUSED_REG ] && P32=$MOEFUSED_REG
  timed prefill-sdpa && [ -f $SDPA_REG ] && P32=$SDPA_REG
  timed prefill-kda-split && [ -f $KSPLIT_REG ] && P32=$KSPLIT_REG
  [ -n "$P32" ] && run prefill-now-32k 120 sparkops bench prefill --model $M --tokens 32768 --chunk 32768 \
      --repeats 2 --registry $P32 $GATE --change "$(basename $P32) prefill in one chunk of 32768 (one arm, against the frontier)"
  [ -n "$P32" ] && run diagnose-prefill-now-16k 60 sparkops diagnose --model $M --device cuda --depth 0 \
      --prefill-chunk 16384 --registry $P32 $FILL_LEAN --out "$R/diag-prefill-now-16k" --json-out $DJ/diag-prefill-now-16k.json
  tune_prefill
  ;;
proofs11)  # the rungs11 proofs: the lane beside a rungs11 lane (no prerequisites)
  proof_moefused; proof_sdpa; proof_kdasplit; proof_tuned ;;
tune11)  # the prefill tune studies (after session 11's new defaults: each study's first row is the default now)
  tune_prefill ;;
rungs11b)  # the lane beside rungs11, after proofs11's tests: the split-KDA rung, once the other lane has made the
  # fused-MoE registry and its 32768 diagnosis (waited for within the budget), so both GPUs time rungs
  await_file $MOEFUSED_REG && await_file $DJ/diag-prefill-32k.json || continue
  split_rung_32k $MOEFUSED_REG ;;
rungs12)
  prereq_lean || continue
  prefill_now_fused || continue
  prefill_chain prefill-kda-tf32-32k
  # kda=triton_chunked_split_tf32: the split prepare's small products on plain tf32 dots (session 12's tune study:
  # 9.17 against 10.79 ms a layer at T=32768), after its GPU tests (proofs12 runs them beside)
  kda_rung_32k now kdatf32 kda-tf32 $KTF32_REG kda=triton_chunked_split_tf32 "$KTF32_FACTOR" \
      "the split KDA prepare's small products on tf32 tensor cores"
  ;;
rungs13)
  prereq_lean || continue
  prefill_now_fused || continue
  prefill_chain prefill-kda-bf16scratch-32k
  # kda=triton_chunked_split_tf32_bf16scratch: the state kernel's W, Qg, Kg in bfloat16 (session 12's tune study:
  # 8.06 against 9.41 ms a layer at T=32768), after its GPU tests (proofs13 runs them beside)
  kda_rung_32k tf32 kdabf16s kda-bf16scratch $KBF16S_REG kda=triton_chunked_split_tf32_bf16scratch \
      "$KBF16S_FACTOR" "the KDA state kernel's W, Qg, Kg in bfloat16"
  ;;
proofs13)  # the rungs13 proofs: the lane beside a rungs13 lane
  proof_kdabf16s ;;
probe_l2)  # decode lead (session 12): the L2 prefetch kernel's GPU tests, then the probe (bench/probes/l2_prefetch.py)
  # timing one token's Q4_K GEMVs plain, with the next weights prefetched, and L2-hot; JSON beside the log
  run gpu-tests-l2prefetch 60 python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_cupy_l2_prefetch.py --junitxml="$R/gpu-tests-l2prefetch.xml"
  [ "$(marker $DONE/gpu-tests-l2prefetch)" = 0 ] && run probe-l2-prefetch 120 \
      python3 bench/probes/l2_prefetch.py --out "$R/probe-l2-prefetch.json"
  ;;
rungs13d)  # session 13's decode rung over the decode step rebuilt (rungs8's chain by swaps; SUITE_TIMED names rows)
  prereq_lean || continue
  decode_chain
  proof_rowwarp
  RW_BASE=$(now_reg decode-linear-rowwarp)
  RW_OK=$([ "$(marker $DONE/gpu-tests-rowwarp)" = 0 ] && echo 1)
  # the base's diagnosis at d=0 (the prediction's input): where the step's time goes before the rung
  run diagnose-decode-rw-2d 90 sparkops diagnose --model $M --device cuda --depth 0,32768 --registry $RW_BASE $FILL_LEAN \
      --out "$R/diag-decode-rw" --json-out $DJ/diag-decode-rw-2d.json
  fresh_over $RW_REG $RW_BASE
  [ -n "$RW_OK" ] && [ ! -f $RW_REG ] && run swap-linear-rowwarp 30 bash -c 'swap_into "$@"' _ $RW_REG $RW_BASE \
      linear@Q4_K=cupy_rowwarp
  [ -n "$RW_OK" ] && [ -f $RW_REG ] && run gate-captured-rowwarp 30 sparkops check --model k3-nano --registry $RW_REG \
      --device cuda --captured
  [ -n "$RW_OK" ] && [ -f $RW_REG ] && [ -s $DJ/diag-decode-rw-2d.json ] && run decode-linear-rowwarp 150 sparkops bench \
      decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $RW_BASE --vs $RW_REG --graph A,B $GATE \
      $FILL_LEAN --changes linear@Q4_K --prediction $DJ/diag-decode-rw-2d.json --expect "$RW_FACTOR" \
      --change "linear@Q4_K=cupy_rowwarp: the Q4_K projections as one warp per row, a row's loads at once, over $(basename $RW_BASE), graph"
  ;;
proofs13d)  # the rungs13d proofs: the lane beside a rungs13d lane
  proof_rowwarp ;;
proofs14d)  # the rungs14d proofs, in the order rungs14d takes them: the lane beside a rungs14d lane
  proof_mma
  proof_floatrow
  proof_rowwarp ;;
rungs14d)  # the decode rungs after session 13: over the step rebuilt through the row-warp rung (SUITE_TIMED names it)
  prereq_lean || continue
  decode_chain
  timed decode-linear-rowwarp && rebuild_over linear-rowwarp $RW_REG "$(now_reg decode-linear-rowwarp)" \
      linear@Q4_K=cupy_rowwarp
  NOW14=$(now_reg decode-linear-mma)
  # cupy_rowwarp's defaults changed after session 13's row (its call 8: the copy form for weights of 4096 rows and
  # more): the step now as one arm at 0 and 32768, against the frontier (399.2 and 384.1)
  run decode-rowwarp-copy 110 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 \
      --registry $NOW14 --graph A $GATE $FILL_LEAN --change "cupy_rowwarp's copy form for weights of 4096 rows and \
more (session 13, call 8: 12288 x 2304 12.3 against 13.0 us); $(basename $NOW14) (one arm, against the frontier)"
  # then each rung over the newest winner, after its GPU tests, predicted from their per-op record: the tensor cores
  # first (the largest expected gain), the experts' row-warp kernels last and only where the tensor cores lost
  proof_mma
  decode_rung linear-mma $MMA_REG linear@Q4_K=cupy_mma linear@Q4_K \
      "linear@Q4_K=$(perop mma cupy_rowwarp cupy_mma)" mma "the Q4_K projections on the tensor cores"
  MM_BEFORE=triton_prefetch
  decode_rung moe-mma $MOEMMA_REG moe_experts=cupy_mma moe_experts \
      "moe_experts=$(perop moe "$MM_BEFORE" cupy_mma)" mma "one token's Q4_K experts on the tensor cores"
  proof_floatrow
  decode_rung linear-floatrow $FLOATROW_REG linear@F16=cupy_floatrow linear@F16 \
      "linear@F16=$(perop floatrow triton_lastblock cupy_floatrow)" floatrow \
      "KDA's F16 low-rank GEMVs as lanes a row, a row's loads at once"
  if timed decode-moe-mma; then
    log "decode-moe-rowwarp: left out (the experts' tensor-core rung won)"
  else
    proof_rowwarp
    decode_rung moe-rowwarp $MOERW_REG moe_experts=cupy_rowwarp moe_experts "$MOERW_FACTOR" rowwarp \
        "one token's Q4_K experts in two row-warp launches"
  fi
  ;;
rungs15d)  # session 15's decode rungs: the staged row-warp forms over the step rebuilt through the row-warp rung
  # (SUITE_TIMED names it), after their GPU tests (proofs13d runs them in the lane beside), each predicted from the
  # side-by-side's record: the linear's staged form against cupy_rowwarp's defaults, the experts' staged gate/up (with
  # the warp down) against triton_prefetch, the step's experts
  prereq_lean || continue
  decode_chain
  timed decode-linear-rowwarp && rebuild_over linear-rowwarp $RW_REG "$(now_reg decode-linear-rowwarp)" \
      linear@Q4_K=cupy_rowwarp
  proof_rowwarp
  decode_rung linear-rowwarp-staged $RWSTG_REG linear@Q4_K=cupy_rowwarp_staged linear@Q4_K \
      "linear@Q4_K=$(perop rowwarp cupy_rowwarp 'staged form')" rowwarp \
      "the Q4_K projections as a warp a row from staged activations (4x the octet form's warps)"
  decode_rung moe-rowwarp-staged $MOESTG_REG moe_experts=cupy_rowwarp_staged moe_experts \
      "moe_experts=$(perop moe triton_prefetch 'cupy_rowwarp staged/warp')" rowwarp \
      "one token's Q4_K experts, gate/up as a warp a hidden row from staged activations, down a warp an output"
  ;;
proofs15r)  # the rungs15r proof: the lane beside a rungs15r lane
  proof_router ;;
rungs15r)  # session 15's router rung over the step now (the decode step rebuilt through the row-warp rung; SUITE_TIMED
  # names its rows), after its GPU tests, predicted from the side-by-side's record against triton_prefetch
  prereq_lean || continue
  decode_chain
  timed decode-linear-rowwarp && rebuild_over linear-rowwarp $RW_REG "$(now_reg decode-linear-rowwarp)" \
      linear@Q4_K=cupy_rowwarp
  proof_router
  decode_rung router-rowwarp $ROUTRW_REG moe_router=cupy_rowwarp moe_router \
      "moe_router=$(perop router triton_prefetch cupy_rowwarp)" router \
      "decode's router in one launch: a warp an expert's float32 logit, the token's last block routes by warp reductions"
  ;;
proofs16d)  # the rungs16d proof: the lane beside a rungs16d lane
  proof_rowhalf ;;
rungs16d)  # session 16's decode rung over the step now (the decode step rebuilt through the row-warp rung; SUITE_TIMED
  # names its rows), after its GPU tests, predicted from the row-warp side-by-side's record
  prereq_lean || continue
  decode_chain
  timed decode-linear-rowwarp && rebuild_over linear-rowwarp $RW_REG "$(now_reg decode-linear-rowwarp)" \
      linear@Q4_K=cupy_rowwarp
  proof_rowhalf
  decode_rung linear-rowhalf $RWHALF_REG linear@Q4_K=cupy_rowhalf linear@Q4_K \
      "linear@Q4_K=$(perop rowwarp cupy_rowwarp cupy_rowhalf)" rowhalf \
      "the tall Q4_K projections in the copy form with packed half2 products (fp16 activations scaled by a power of two)"
  decode_rung moe-rowhalf $MOEHALF_REG moe_experts=cupy_rowhalf moe_experts \
      "moe_experts=$(perop moe triton_prefetch cupy_rowhalf)" rowhalf \
      "one token's Q4_K experts, gate/up in the copy form with packed half2 products, down in float32"
  ;;
probe_mma)  # decode lead (session 14, for session 15): cupy_mma's pipe form at 4, 8, 16 warps a tile beside the tile
  # form and cupy_rowwarp at the 48B's decode shapes (bench/probes/mma_pipe_warps.py): does occupancy bind it?
  run probe-mma-pipe-warps 90 python3 bench/probes/mma_pipe_warps.py --out "$R/probe-mma-pipe-warps.json" ;;
probe_ncu)  # decode lead (session 13, for session 14): Nsight Compute's counters on one launch of each decode GEMV
  # form at the 48B's two largest decode projections (bench/probes/rowwarp_kernels.py): issue-slot use, stall reasons,
  # occupancy, DRAM throughput. ncu reads counters only on some machines (the device notes: Firecracker, not gVisor)
  # (24 launches a pass: the 7 row-warp forms, the half form, the 2 tensor-core forms, Triton's GEMV and a plain read,
  # per shape)
  ncu_passes rowwarp "rowwarp|rowoct|rowcp|rowstg|rowhc|_mma|_gemv_kernel|_read_kernel" 24 \
      bench/probes/rowwarp_kernels.py ;;
probe_ncu_moe)  # decode lead (session 26): the same counters on one launch of each one-token expert kernel pair at
  # the 48B's MoE layer, serialized (bench/probes/moe_kernels.py; 31 launches a pass): each kernel's own time, DRAM
  # share, occupancy and stalls, which the step's overlapping PDL pair hides
  ncu_passes moe "moe_q4_k|_read_kernel" 31 bench/probes/moe_kernels.py ;;
probe_router)  # decode lead (session 15, for session 16): the same counters on the routers, float32 and bf16
  # activations (bench/probes/router_kernels.py): why bf16 costs cupy_rowwarp's router ~1 us more (6 launches a pass:
  # the PDL router since session 30)
  ncu_passes router "moe_router_rowwarp|_logits_gemv_kernel" 6 bench/probes/router_kernels.py ;;
probe_ncu_source_router)  # decode lead (session 30, for session 31): where in its SASS the step's router waits (its
  # own time 5.8 us a layer for 2.4 MB in session 30's timeline): the PDL router with bf16 activations, the fourth of
  # its launches in bench/probes/router_kernels.py (warm-up float32 and bf16, then measured), its source page as CSV
  if ! command -v ncu > /dev/null; then log "probe-ncu-source-router: no ncu on this machine; nothing profiled"; continue; fi
  f=probe-ncu-source-router
  run $f 120 ncu --clock-control none --section WarpStateStats --section SourceCounters \
      -k "regex:moe_router_rowwarp_pdl\$" --launch-skip 3 --launch-count 1 --page source --print-source sass --csv \
      python3 bench/probes/router_kernels.py
  [ -s "$R/$f.log" ] && python3 bench/probes/ncu_source_table.py "$R/$f.log" --json "$R/$f.json" > "$R/$f-table.txt" 2>&1
  ;;
probe_fold)  # decode lead (session 38): the norm folds' ~15 / ~6 us tail placed inside the fused kernel - the
  # norm, its registers, the arrival - each left out in turn (row_add_norm.cuh's RAN_PROBE), PDL on and off
  run probe-fold-anatomy 300 python3 bench/probes/fold_anatomy.py --out "$R/probe-fold-anatomy.json" ;;
probe_l2_hot)  # decode lead (session 34): each of the step's kernels timed with its weights cold (sets rotated past
  # the L2) and L2-hot (one set), the same bits asked of both (bench/probes/l2_hot.py; ~1 GB of expert weights built);
  # then (session 43) router -> experts -> q|k|v chains, plain and with the GEMV's weight prefetched on a side stream
  # (the prefetch's own GPU test first: it changes nothing, is captured, takes blocks=, refuses blocks=0)
  run gpu-tests-l2-prefetch 60 python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      tests/backends/test_cupy_l2_prefetch.py --junitxml="$R/gpu-tests-l2-prefetch.xml"
  run probe-l2-hot 300 python3 bench/probes/l2_hot.py --out "$R/probe-l2-hot.json" ;;
probe_split)  # decode lead (session 54): the MLA splits (one-group, qreg, ring, l2pf, twin, bulk) with their tile
  # arithmetic, refills or tensor-core products left out (source edits of attention.cu), each as 8 launches over two
  # 131072-row caches in one graph (bench/probes/split_anatomy.py): whether its loads or its per-tile chain take its
  # time. Each variant compiles attention.cu again (session 55: ~80 s a kernel, three kernels past a 246 s budget), so
  # SUITE_SPLIT_KERNELS names the kernels to take apart (default: all six)
  # shellcheck disable=SC2086 # a word list
  run probe-split-anatomy 150 python3 bench/probes/split_anatomy.py --out "$R/probe-split-anatomy.json" \
      ${SUITE_SPLIT_KERNELS:+--kernels $SUITE_SPLIT_KERNELS} ;;
probe_gateup)  # decode lead (session 43): the step's MoE gate/up kernel with its x staging, its dots or its weight
  # copies left out (source edits of gateup_q8_q4_k), each as 64 PDL launches over rotated routings in one graph
  # (bench/probes/gateup_anatomy.py, ~60 s): which part the kernel waits on
  run probe-gateup-anatomy 200 python3 bench/probes/gateup_anatomy.py --out "$R/probe-gateup-anatomy.json" ;;
probe_router_code)  # decode lead (session 42): each routing form's router timed after its norm with the L2 warm and
  # with a 96 MB read before each pair (its code and data gone from the L2, as in the step): whether a form pays for
  # its code (bench/probes/router_code.py, ~60 s)
  run probe-router-code 150 python3 bench/probes/router_code.py --out "$R/probe-router-code.json" ;;
probe_router_anatomy)  # decode lead (session 31): the step's router timed after its norm with stages left out
  # (kernels/moe_router.cu's RT_PROBE: no routing, no arrival, no read of x), each as 40 norm-router pairs in one
  # graph, and at 1, 2 and 4 warps a block (bench/probes/router_anatomy.py, ~30 s)
  run probe-router-anatomy 120 python3 bench/probes/router_anatomy.py --out "$R/probe-router-anatomy.json" ;;
probe_pdl)  # decode lead (session 16, for session 17): the copy form written for programmatic dependent launch - its
  # GPU tests (bitwise the copy form, eagerly and replayed from a graph with every buffer NaN between replays; the
  # gate of cupy_rowwarp_pdl), then a chain of 24 dependent 48B-shaped GEMVs timed plain and with PDL
  # (bench/probes/pdl_chain.py). No model: one GPU, a short call
  proof_pdl && probe_pdl_chain ;;
probe_xcast)  # decode lead (session 17): every block of a grid reading the same activations from L2 against each its
  # own (bench/probes/x_broadcast.py), at the copy form's grids: is the shared read of x a cost of its own? No model
  run probe-x-broadcast 90 python3 bench/probes/x_broadcast.py --out "$R/probe-x-broadcast.json" ;;
rungs18e)  # session 18's attention rung over the row-warp step (the decode step rebuilt through it), after its proof:
  # attention=cupy_splitk_bf16_active, forecast from its side-by-side at the step's d=0 position
  rowwarp_step rungs18e || continue
  proof_attn_active
  decode_rung attn-active $ATTNACT_REG attention=cupy_splitk_bf16_active attention \
      "attention=$(perop attention cupy_splitk_bf16 cupy_splitk_bf16_active)" attn-active \
      "MLA decode's split and combine with the slices a short context leaves empty neither written nor read (the \
same bits)" $RW_REG
  ;;
rungs19)  # session 19's decode rung over the row-warp step (the decode step rebuilt through it), after its proof:
  # [engine] side_stream, forecast from half the F16 gate GEMVs' time hidden ($SIDE_F16_FACTOR)
  rowwarp_step rungs19 || continue
  proof_side_stream
  engine_rung side-stream $RW_REG $SIDE_REG side_stream "linear@F16=$SIDE_F16_FACTOR" \
      "a KDA layer's gate projections on a second CUDA stream, concurrent with q/k/v and the short conv (the same \
kernels and bits)"
  ;;
rungs20)  # session 20's decode rung over the side-stream step (the row-warp step with [engine] side_stream), after
  # the side stream's proof (now with its priority tests): [engine] side_priority (the side stream at the highest
  # priority), forecast from a third of the gate GEMVs' time hidden beyond what the side stream hid ($SIDEPRIO_F16_FACTOR)
  rowwarp_step rungs20 || continue
  proof_side_stream
  engine_over $SIDE_REG $RW_REG side_stream
  engine_rung side-priority $SIDE_REG $SIDEPRIO_REG side_priority "linear@F16=$SIDEPRIO_F16_FACTOR" \
      "the side stream at the device's highest priority, so that the gate GEMVs' blocks start before q/k/v's \
waiting ones (the same kernels and bits)"
  proof_router_pdl
  decode_rung router-pdl $ROUTPDL_REG "add_rmsnorm=triton_pdl moe_router=cupy_rowwarp_pdl" add_rmsnorm,moe_router \
      "moe_router=$(perop routerpdl triton_prefetch cupy_rowwarp_pdl)" router-pdl \
      "the norm lets the router start, whose warps request their weight rows before they wait for its output" $RW_REG
  ;;
rungs21)  # the fused-norm decode rung over the row-warp step, after its proof: [engine] fuse_kda_norm with the
  # faster fused kda_norm, forecast from the chain-and-fused side-by-side's record; then swiglu=triton the same way
  rowwarp_step rungs21 || continue
  proof_kda_norm
  kda_norm_rung
  proof_swiglu
  decode_rung swiglu-triton $SWIGLU_REG swiglu=triton swiglu "swiglu=$(perop swiglu torch triton)" swiglu \
      "the dense layer's SwiGLU in one launch (torch's is five)" $RW_REG
  ;;
rungs22)  # the deep-absorb attention rung over the row-warp step, after its proof: attention=cupy_splitk_bf16_deep,
  # forecast from its side-by-side at the step's d=0 position
  rowwarp_step rungs22 || continue
  proof_attn_deep
  decode_rung attn-deep $ATTNDEEP_REG attention=cupy_splitk_bf16_deep attention \
      "attention=$(perop attndeep cupy_splitk_bf16 cupy_splitk_bf16_deep)" attn-deep \
      "MLA decode's absorb, combine and up projection with their loads in flight at once (the same bits)" $RW_REG
  ;;
proofs22)  # the deep-absorb attention's GPU tests alone (the lane beside rungs22)
  proof_attn_deep ;;
rungs22all)  # session 22's step over the row-warp step: its four none rungs swapped in together, timed as one rung
  # (session 22 timed it by hand: with SUITE_TIMED naming decode-s22-all the step is only made)
  s22_step rungs22all || continue
  s22_rung
  ;;
rungs23)  # the earlier nones over session 22's step (made first), together, then each alone (stage list above);
  # every proof first (a fresh call cannot reach the first pair after the step's ~300 s; the next call times pairs
  # only)
  s22_step rungs23 || continue
  proof_side_stream
  proof_kda_norm
  proof_attn_deep
  # with rungs24 named in the same call, its proof too: every proof before the first diagnosis and pair
  [[ $CALL_STAGES == *" rungs24 "* ]] && proof_kda_lowrank
  s23_rungs
  ;;
rungs24)  # [engine] fuse_kda_gates over the step now (session 22's made first; the rungs23 registry when
  # decode-s23-nones won), after its proof: the faster kda_lowrank_norm, forecast from its side-by-side's record
  s22_step rungs24 || continue
  proof_kda_lowrank
  s24_rung
  ;;
proofs24)  # the fused gates' GPU tests alone (kda_lowrank_norm's kernels, the engine option): the lane beside rungs24
  proof_kda_lowrank ;;
rungs25)  # two rungs over session 23's step (session 22's made first, the rungs23 registry by swaps in s25_rungs):
  # the F16 gate GEMVs with PDL, then the fused gates in their PDL form, after both proofs (stage list above)
  s22_step rungs25 || continue
  proof_f16_pdl
  proof_conv_pdl
  proof_kda_lowrank
  s25_rungs
  ;;
rungs26|rungs26w|rungs27|rungs27q|rungs28|rungs29|rungs30|rungs31|rungs32|rungs33|rungs34|rungs35|rungs36|rungs37|rungs38|rungs39|rungs40|rungs41|rungs42|rungs43|rungs44|rungs45|rungs46|rungs47|rungs48|rungs49|rungs50|rungs51|rungs52|rungs53|rungs54|rungs55|rungs56|rungs57|rungs58)  # a rung over the step now (session 23's, made by swaps:
  # SUITE_TIMED names decode-s23-nones; or a newer one that won): rungs26 the shared-first gate/up, rungs26w the wide
  # down, rungs27 the split down, rungs27q the Q8 gate/up, rungs28 the Q8 hidden vector, rungs29 the Q8 Q4_K GEMVs,
  # rungs30 the pipelined Q8 gate/up, rungs31 the pairs dot loop, rungs32 the x16 lm_head, rungs33 the copy down,
  # rungs34 the stacked nones, rungs35 the down's loads earlier; each after its GPU tests
  # (rung_parts names both)
  s22_step $stage || continue
  s23_step || { log "$stage: no session-23 step ($S23_REG)"; continue; }
  now_chain $stage || continue
  read -r proof rung <<< "$(rung_parts $stage)"
  $proof
  $rung
  ;;
proofs26|proofs26w|proofs27|proofs27q|proofs28|proofs29|proofs30|proofs31|proofs32|proofs33|proofs34|proofs35|proofs36|proofs37|proofs38|proofs39|proofs40|proofs41|proofs42|proofs43|proofs44|proofs45|proofs46|proofs47|proofs48|proofs49|proofs50|proofs51|proofs52|proofs53|proofs54|proofs55|proofs56|proofs57|proofs58)  # that rung's GPU tests alone (the lane beside rungsN)
  read -r proof rung <<< "$(rung_parts rungs${stage#proofs})"
  $proof ;;
proofs25)  # those rungs' GPU tests alone (the F16 PDL GEMVs', the PDL short conv's, the fused gates'): the lane beside
  # rungs25
  proof_f16_pdl
  proof_conv_pdl
  proof_kda_lowrank ;;
proofs21)  # the fused KDA norm's and the Triton SwiGLU's GPU tests alone (the lane beside rungs21)
  proof_kda_norm
  proof_swiglu ;;
probe_timeline)  # decode lead (session 19, for session 20): the replayed step kernel by kernel (bench/probes/
  # step_timeline.py) under the row-warp step, with the side stream, and with it at the highest priority: does the
  # side chain run beside q/k/v, does it slow it, and where the step's idle gaps are
  rowwarp_step probe_timeline || continue
  engine_over $SIDE_REG $RW_REG side_stream
  engine_over $SIDEPRIO_REG $SIDE_REG side_priority
  run probe-timeline 300 python3 bench/probes/step_timeline.py --model $M --registry $RW_REG --registry $SIDE_REG \
      --registry $SIDEPRIO_REG --fill-registry $BF16_REG --depth 0 --replays 5 --out "$R/probe-timeline.json" \
      --png "$R/probe-timeline.png"
  ;;
probe_timeline23)  # decode lead (session 23, for session 24): session 22's step and session 23's (the earlier nones
  # together: 1.095 / 1.093, twice its forecast) replayed kernel by kernel at d=0 (bench/probes/step_timeline.py):
  # which kernels got faster, which launches went, how much more ran at once - for ~200 s, where the three pairs
  # that time each change alone cost ~390 s each
  s22_step probe_timeline23 || continue
  s23_step || { log "probe_timeline23: no session-23 step ($S23_REG)"; continue; }
  run probe-timeline23 240 python3 bench/probes/step_timeline.py --model $M --registry $S22_REG --registry $S23_REG \
      --fill-registry $BF16_REG --depth 0 --replays 5 --out "$R/probe-timeline23.json" --png "$R/probe-timeline23.png"
  ;;
probe_timeline_now)  # decode lead (session 30, for session 31): the step now replayed kernel by kernel with each
  # kernel's own time, then each newer rung's registry this machine has made (NOW_RUNGS' registries above the step
  # now, newest last): where a rung's gain went, or what it cost. Session 30 ran it by hand (call 5, ~50 s for two)
  tl_now=$(now_reg)
  [ -f "$tl_now" ] || { log "probe-timeline-now: the step now ($tl_now) is not on this machine; run its stage first"; continue; }
  tl_regs="--registry $tl_now" tl_newer=""
  for pair in "${NOW_RUNGS[@]}"; do
    var=${pair#*=}
    [ "${!var}" = "$tl_now" ] && break
    [ -f "${!var}" ] && tl_newer="${!var} $tl_newer"
  done
  for tl_r in $tl_newer; do tl_regs="$tl_regs --registry $tl_r"; done
  [ -f $M ] || stage_synth
  # shellcheck disable=SC2086 # the registry flags are a word list
  run probe-timeline-now 150 python3 bench/probes/step_timeline.py --model $M $tl_regs --fill-registry $BF16_REG \
      --depth 0 --replays 5 --out "$R/probe-timeline-now.json" --png "$R/probe-timeline-now.png"
  ;;
probe_timeline24)  # decode lead (session 24, for session 25): the replayed steps kernel by kernel with each kernel's
  # own time (what it adds to the busy time: under PDL the only per-kernel figure that sums to the span), session 23's
  # step first (the comparison's base), then session 22's (where the 1.095 went, read with its sign turned) and
  # whichever of stage rungs25's registries this machine has made; ~20 s a registry (session 24)
  s22_step probe_timeline24 || continue
  s23_step || { log "probe_timeline24: no session-23 step ($S23_REG)"; continue; }
  tl_regs="--registry $S23_REG --registry $S22_REG"
  for tl_r in $S25_CHAIN_REG $S25_CONVPDL_REG $S25_F16PDL_REG $S25_GATESPDL_REG; do
    [ -f "$tl_r" ] && tl_regs="$tl_regs --registry $tl_r"
  done
  # shellcheck disable=SC2086 # the registry flags are a word list
  run probe-timeline24 150 python3 bench/probes/step_timeline.py --model $M $tl_regs --fill-registry $BF16_REG \
      --depth 0 --replays 5 --out "$R/probe-timeline24.json" --png "$R/probe-timeline24.png"
  ;;
proofs19)  # session 19: the side stream's GPU tests alone (the lane beside rungs19)
  proof_side_stream ;;
probe_attn_active)  # session 18: the active attention's proof alone (the lane beside rungs18e)
  proof_attn_active ;;
probe_persist)  # decode lead (session 18): one persistent launch against one launch a GEMV on a chain of dependent
  # GEMVs (bench/probes/persistent_chain.py): the structural lever's size, before anyone builds it
  run probe-persist 90 python3 bench/probes/persistent_chain.py --out "$R/probe-persist.json"
  # (session 45) the same chain at half the rows a GEMV: what its dependencies cost when its bytes are few
  run probe-persist-1152 90 python3 bench/probes/persistent_chain.py --rows 1152 --out "$R/probe-persist-1152.json"
  # (session 46) what the 1152-row run means for the 48B's step: the fastest proven persistent form's time a GEMV there
  # as a stage's latency in bench/probes/persistent_forecast.py's model of a persistent step (tok/s against the
  # latency at three stream bandwidths, the share of the roofline)
  if [ -s "$R/probe-persist-1152.json" ]; then
    run probe-persist-forecast 30 python3 bench/probes/persistent_forecast.py \
      --probe-latency "$R/probe-persist-1152.json" --json "$R/persist-forecast.json" --plot "$R/persist-forecast.png"
  else log "probe-persist-forecast: left out: the probe wrote no JSON at 1152 rows"; fi ;;
probe_persist_floor)  # decode lead (session 46): the same chain at 8 and 264 rows a GEMV, where the bytes are nearly
  # none: what a dependent stage costs in each form when only its synchronisation and x are left (the warp rings need
  # a row a warp and are left out there; launches and the barrier forms run)
  run probe-persist-8 60 python3 bench/probes/persistent_chain.py --rows 8 --out "$R/probe-persist-8.json"
  run probe-persist-264 60 python3 bench/probes/persistent_chain.py --rows 264 --out "$R/probe-persist-264.json" ;;
probe_q4k)  # decode lead (session 49): the persistent chain on the step's own Q4_K stages at their widths (in 17 MB,
  # gates 7, out 5 at 4096 inputs, router 5, experts 21, down 12 at 1024), x quantized to Q8 as the step does: each
  # stage kind's latency (traced) for persistent_forecast.py, and the chain's rate against a plain read of its bytes
  run probe-q4k 150 python3 bench/probes/q4k_chain.py --out "$R/probe-q4k.json"
  # the latency that makes the forecast's stream reproduce the fastest proven paced chain, then the 48B's step with it
  if [ -s "$R/probe-q4k.json" ]; then
    run probe-q4k-forecast 30 python3 bench/probes/persistent_forecast.py --q4k-latency "$R/probe-q4k.json" \
      --merge local --json "$R/q4k-forecast.json" --plot "$R/q4k-forecast.png"
  else log "probe-q4k-forecast: left out: the probe wrote no JSON"; fi ;;
probe_iq1s)  # decode lead (session 50): the IQ1_S step's weight kernels (cupy_float's GEMVs, triton_prefetch's experts
  # by session 25's policy fix) against every registered implementation that serves IQ1_S, at the 48B's shapes, each
  # output judged against the reference by its claim; the forecast of the swaps on the IQ1_S step at 131072. First the
  # GPU tests of the new kernels it times (cupy_rowwarp_pdl_q8_iq1s of linear and of moe_experts, and the experts'
  # cupy_rowwarp_pdl_q8h_iq1s: rows, bits, graph, policy)
  run gpu-tests-iq1s 90 python3 -m pytest -q -rP -m gpu -p no:cacheprovider tests/backends/test_cupy_linear_iq1s.py \
      tests/backends/test_cupy_moe_experts_iq1s.py -k "not t2"
  # (session 52) the t2 forms' tests apart: where they fail, the t2 forms are left out of the probe and the rungs,
  # not the rest with them
  run gpu-tests-iq1s-t2 60 python3 -m pytest -q -rP -m gpu -p no:cacheprovider tests/backends/test_cupy_linear_iq1s.py \
      tests/backends/test_cupy_moe_experts_iq1s.py -k t2
  IQ1S_WITHOUT=""
  [ "$(marker $DONE/gpu-tests-iq1s-t2)" = 0 ] || IQ1S_WITHOUT="--without linear=cupy_rowwarp_pdl_q8_iq1s_t2 \
--without linear=cupy_rowwarp_pdl_q8_iq1s_t2_rows16 --without moe_experts=cupy_rowwarp_pdl_q8h_iq1s_t2"
  run probe-iq1s 150 python3 bench/probes/iq1s_ops.py --out "$R/probe-iq1s.json" $IQ1S_WITHOUT
  # kept on the machine for rungs_iq1s's --expect (a later call's results directory is another)
  [ -s "$R/probe-iq1s.json" ] && cp "$R/probe-iq1s.json" $DJ/probe-iq1s.json ;;
probe_ncu_iq1s)  # decode lead (session 52): Nsight Compute on one launch of each kernel of the IQ1_S forms the probe
  # has fastest or newest (bf16 activations): the staged_flat experts pair and the t2 repacking's pair and GEMV, each
  # from iq1s_ops.py alone on its kernel, the first matching launch (a form's first, eager call; staged_flat's gate/up
  # kernel is staged_pair's, at the same shape, and is launched first by staged_pair: so each kernel its own run, with
  # the t2 pair's two kernels, which no other form launches, in one)
  if ! command -v ncu > /dev/null; then log "probe-ncu-iq1s: no ncu on this machine; nothing profiled"; continue; fi
  for f in "gateup-pairsg experts 1 moe_iq1_s_gateupq8hpairsgpdl_bf16" \
      "down-flat experts 1 moe_iq1_s_downq8hflatpdl_bf16" "experts-t2 experts 2 moe_iq1_s_t2(gateup|down)q8hpdl_bf16" \
      "gemv-t2 kda_qkv 1 linear_iq1_s_t2rowq8(pair)?pdl_bf16"; do
    read -r name only count regex <<< "$f"
    run probe-ncu-iq1s-$name 90 ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats -k "regex:$regex\$" \
        --launch-count $count python3 bench/probes/iq1s_ops.py --only $only --replays 3
    [ -s "$R/probe-ncu-iq1s-$name.log" ] && python3 bench/probes/ncu_table.py "$R/probe-ncu-iq1s-$name.log" \
        --json "$R/probe-ncu-iq1s-$name.json" > "$R/probe-ncu-iq1s-$name-table.txt" 2>&1
  done ;;
probe_pdl_floor)  # decode lead (session 17, for session 18): a chain of small dependent Triton kernels plain and with
  # PDL through every kernel (bench/probes/pdl_floor.py): how much of a launch PDL through the whole step could hide
  run probe-pdl-floor 90 python3 bench/probes/pdl_floor.py --out "$R/probe-pdl-floor.json" ;;
probe_copy2x)  # decode lead (session 17): copyx and copy2x (each block's first activations requested before its weights)
  # bitwise the copy form, the gate of cupy_rowwarp_copy2x, then timed beside the other forms (the side-by-side's record)
  proof_copy2x ;;
rungs17e)  # session 17's second decode rung over the row-warp step (the decode step rebuilt through it), after its
  # proof: linear@Q4_K=cupy_rowwarp_copy2x, predicted from the side-by-side's record
  rowwarp_step rungs17e || continue
  proof_copy2x
  decode_rung linear-rowwarp-copy2x $RWCOPY2X_REG linear@Q4_K=cupy_rowwarp_copy2x linear@Q4_K \
      "linear@Q4_K=$(perop rowwarp cupy_rowwarp cupy_rowwarp_copy2x)" copy2x \
      "the tall Q4_K projections in copy2 with each block's first activations requested before its weight copies" \
      $RW_REG
  ;;
probe_copy2)  # decode lead (session 16, for session 17): the copy form with its weight copy in two groups (copy2) -
  # bitwise the copy form, every row from NaN, the gate of cupy_rowwarp_copy2, then timed beside the other forms (the
  # side-by-side's record). Session 16's reading: all blocks load, then all decode; if copy2 is faster, that holds
  proof_copy2 ;;
rungs17d)  # session 17's decode rungs, each over the row-warp step (the decode step rebuilt through it), after its proof
  rowwarp_step rungs17d || continue
  proof_copy2
  decode_rung linear-rowwarp-copy2 $RWCOPY2_REG linear@Q4_K=cupy_rowwarp_copy2 linear@Q4_K \
      "linear@Q4_K=$(perop rowwarp cupy_rowwarp cupy_rowwarp_copy2)" copy2 \
      "the tall Q4_K projections' rows copied in two groups, the first half decoded while the second lands" $RW_REG
  proof_pdl && { [ -s $DJ/probe-pdl-chain.json ] || probe_pdl_chain; }
  decode_rung norm-rowwarp-pdl $RWPDL_REG \
      "add_rmsnorm=triton_pdl gated_rmsnorm=triton_pdl linear@Q4_K=cupy_rowwarp_pdl" \
      add_rmsnorm,gated_rmsnorm,linear@Q4_K "linear@Q4_K=$(pdl_factor)" pdl \
      "programmatic dependent launch from each norm to its Q4_K projection (the norm lets the projection start; the projection requests its weights before it waits)" \
      $RW_REG
  decode_rung moe-rowwarp-pdl $MOEPDL_REG moe_experts=cupy_rowwarp_pdl moe_experts \
      "moe_experts=$(perop moe triton_prefetch cupy_rowwarp_pdl)" pdl \
      "one token's Q4_K experts in cupy_rowwarp's copy/warp pair with programmatic dependent launch (down's first weight loads overlap gate/up)" \
      $RW_REG
  ;;
rungs18d)  # session 18's decode rungs over the row-warp step (the decode step rebuilt through it), after the PDL
  # proof and probe: the norm-and-projection pairs with PDL (add_rmsnorm and gated_rmsnorm = triton_pdl, linear@Q4_K=
  # cupy_rowwarp_pdl), forecast from the probe's savings a pair; then moe_experts=cupy_rowwarp_pdl, from the MoE
  # side-by-side. Session 17 timed both with x read from L2 (0.798, 0.683); the kernels now read it through L1
  rowwarp_step rungs18d || continue
  proof_pdl && { [ -s $DJ/probe-pdl-chain.json ] || probe_pdl_chain; }
  [ -s $DJ/perop-rowwarp-bfloat16.json ] || proof_rowwarp_side
  decode_rung norm-pdl-l1 $RWPDL1_REG \
      "add_rmsnorm=triton_pdl gated_rmsnorm=triton_pdl linear@Q4_K=cupy_rowwarp_pdl" \
      add_rmsnorm,gated_rmsnorm,linear@Q4_K "linear@Q4_K=$(pdl_factor)" pdl \
      "programmatic dependent launch from each norm to its Q4_K projection, x read through L1 after the wait (\
session 17's kernels read it from L2)" \
      $RW_REG
  decode_rung moe-pdl-l1 $MOEPDL1_REG moe_experts=cupy_rowwarp_pdl moe_experts \
      "moe_experts=$(perop moe triton_prefetch cupy_rowwarp_pdl)" pdl \
      "cupy_rowwarp's copy/warp experts with programmatic dependent launch, h read through L1 after the wait (\
session 17's kernels read it from L2)" \
      $RW_REG
  # both at once: session 17's per-op figures forecast ~1.3% each, inside the 2% band a single rung must clear to win;
  # together ~2.6%. A forecast only with both factors (else the rung is left out, as decode_rung does)
  pdl_lin=$(pdl_factor) pdl_moe=$(perop moe triton_prefetch cupy_rowwarp_pdl)
  decode_rung pdl-l1-both $PDLBOTH_REG \
      "add_rmsnorm=triton_pdl gated_rmsnorm=triton_pdl linear@Q4_K=cupy_rowwarp_pdl moe_experts=cupy_rowwarp_pdl" \
      add_rmsnorm,gated_rmsnorm,linear@Q4_K,moe_experts \
      "$([ -n "$pdl_lin" ] && [ -n "$pdl_moe" ] && echo "linear@Q4_K=$pdl_lin,moe_experts=$pdl_moe" || echo "linear@Q4_K=")" \
      pdl \
      "the norm-PDL pairs and the PDL experts together, x and h read through L1 after the wait" $RW_REG
  ;;
probe_ncu_source)  # decode lead (session 16, for session 17): where in its SASS the copy form's warps wait, at
  # 12288 x 2304 (bf16): Nsight Compute's source page (per-instruction executions and stall samples) as CSV. Session
  # 17 found a quarter of the samples on the first use of x (requested after the weights). NCU_SOURCE_KERNEL names
  # another form's kernel stem (rowcp2x: copy2x, x requested first); the log is probe-ncu-source-STEM
  k=${NCU_SOURCE_KERNEL:-rowcp}
  if ! command -v ncu > /dev/null; then log "probe-ncu-source: no ncu on this machine; nothing profiled"; continue; fi
  f=probe-ncu-source$([ "$k" = rowcp ] || echo "-$k")
  run $f 150 ncu --clock-control none --section WarpStateStats \
      --section SourceCounters -k "regex:linear_q4_k_${k}_bf16" --launch-skip 1 --launch-count 1 --page source \
      --print-source sass --csv python3 bench/probes/rowwarp_kernels.py --shapes 12288x2304
  # the stall samples by reason and the instructions holding the most (bench/probes/ncu_source_table.py)
  [ -s "$R/$f.log" ] && python3 bench/probes/ncu_source_table.py "$R/$f.log" --json "$R/$f.json" > "$R/$f-table.txt" 2>&1
  ;;
probe_ncu_source_moe)  # decode lead (session 30, for session 31): where in their SASS the step's MoE kernels' warps
  # wait - the Q8 hidden pair's down (session 30: its long-scoreboard stalls stayed ~6.4 an issue in the copy form,
  # every weight in shared memory, so what it waits on is not its weights), the pairs gate/up with x padded, and the
  # down with its loads requested earlier (cupy_rowwarp_pdl_q8_hidden_ld, written from the first's page) - each
  # launched alone by bench/probes/moe_kernels.py --only (warm-up, then the one profiled), its source page as CSV
  if ! command -v ncu > /dev/null; then log "probe-ncu-source-moe: no ncu on this machine; nothing profiled"; continue; fi
  for pair in "downq8pdl:cupy_rowwarp_pdl_q8_hidden" "gateupq8hwxpdl_bf16:cupy_rowwarp_pdl_q8_pairs padded x" \
      "downq8aheadpdl:cupy_rowwarp_pdl_q8_hidden_ld ahead"; do
    k=${pair%%:*} f=probe-ncu-source-moe-${pair%%:*}
    run $f 120 ncu --clock-control none --section WarpStateStats --section SourceCounters -k "regex:moe_q4_k_${k}\$" \
        --launch-skip 1 --launch-count 1 --page source --print-source sass --csv python3 bench/probes/moe_kernels.py \
        --only "${pair#*:}"
    [ -s "$R/$f.log" ] && python3 bench/probes/ncu_source_table.py "$R/$f.log" --json "$R/$f.json" > "$R/$f-table.txt" 2>&1
  done
  ;;
probe_gemv)  # decode lead (session 12, for session 13): where a small Q4_K GEMV's time goes - the launch floor, a
  # plain read of its bytes, the GEMV, L2-hot and cold, and one read over a whole token's set of weights
  run probe-gemv-anatomy 90 python3 bench/probes/gemv_anatomy.py --out "$R/probe-gemv-anatomy.json"
  # and the decode GEMVs' launch shapes again on the same machine (rows, warps, programs per SM before a split-K),
  # the linear's and the experts': if the probe says the GEMV's structure binds, these say which way it gives
  run tune-decode-gemv 90 python3 -m sparkops_triton._tune linear_gemv moe_decode ;;
proofs12)  # the rungs12 proofs and the tf32 prepare's launch study: the lane beside a rungs12 lane
  proof_kdatf32
  run tune-kda-tf32 120 python3 -m sparkops_triton._tune kda_prefill_split_tf32 ;;
rungs11)
  prereq_lean || continue
  prefill_now_fused || continue
  # session 11's tuned launch defaults (the tune studies of its first call; module constants, so no second
  # implementation to pair with): one arm in one forward of 32768 against the frontier (25210, the same registry
  # before them). The swaps above re-checked every changed kernel against the reference, the bench gates the 48B
  # and proves the figure against a 4096-token chunking
  run prefill-tuned-32k 100 sparkops bench prefill --model $M --tokens 32768 --chunk 32768 --repeats 2 \
      --registry $PNOW $GATE --change "session 11's tuned launch defaults: the flash tile 128x64 (3 stages), the \
router GEMM 128x128 in tf32x3, the bf16 decode 16 rows / 2 warps, the KDA prepare at 4 warps unrolled; \
$(basename $PNOW) in one chunk of 32768 (one arm, against the frontier)"
  # where the 32768-token forward's time goes now: the next rungs' prediction
  run diagnose-prefill-32k 90 sparkops diagnose --model $M --device cuda --depth 0 --prefill-chunk 32768 \
      --registry $PNOW $FILL_LEAN --out "$R/diag-prefill-32k" --json-out $DJ/diag-prefill-32k.json
  # attention=triton_sdpa, now on cuDNN only from an empty cache (after a history it runs the Triton kernels: torch's
  # lower-right mask made the logits chunk-dependent in session 11's second call). One forward of 32768: every
  # attention call on cuDNN; the chunk proof re-prefills in 4096-token chunks (the Triton path after the first)
  proof_sdpa
  SD_OK=$([ "$(marker $DONE/gpu-tests-sdpa)" = 0 ] && echo 1)
  fresh_over $SDPA_REG $PNOW
  [ -n "$SD_OK" ] && [ ! -f $SDPA_REG ] && run swap-sdpa 40 bash -c 'swap_into "$@"' _ $SDPA_REG $PNOW \
      attention=triton_sdpa
  [ -n "$SD_OK" ] && [ -f $SDPA_REG ] && [ -s $DJ/diag-prefill-32k.json ] && run prefill-sdpa-32k 110 sparkops bench \
      prefill --model $M --tokens 32768 --chunk 32768 --repeats 6 --registry $PNOW --vs $SDPA_REG $GATE \
      --changes attention --prediction $DJ/diag-prefill-32k.json $SDPA_FULL_EXPECT \
      --change "attention=triton_sdpa: a prefill from an empty cache on cuDNN's attention, over $(basename $PNOW)"
  # kda=triton_chunked_split over the same base (its own rung, beside the SDPA one; rungs11b may have run it in the
  # other lane already, and run() then takes its result)
  split_rung_32k $PNOW
  ;;
proofs7)  # the rungs7 proofs alone: the lane beside a rungs7 lane (bench/gpu_lanes.sh)
  proof_prefetch; proof_wide; proof_flat ;;
rungs7)
  prereq_lean || continue
  depth_of() { python3 -c "import sparkops_triton.$1 as m; print(m.FETCH_DEPTH)" 2>/dev/null || echo "?"; }
  [ -f $FILL_REG ] && FILL_LEAN=$FILL
  [ -f $LB_REG ] || run swap-lastblock 40 bash -c 'swap_into "$@"' _ $LB_REG $FUSED_REG $LB_PAIRS
  if [ -f $LB_REG ] && [ ! -f $CONV_REG ]; then
    cp $LB_REG $CONV_REG.new && sparkops engine fuse_short_conv=on --registry $CONV_REG.new > /dev/null \
      && mv $CONV_REG.new $CONV_REG
  fi
  # deeper weight streams (session 7): a MoE decode program used to wait out its gate GEMV's 9 chunk round trips,
  # then its up GEMV's 9, one chunk in flight (session 6: moe_experts 1.04 ms of the 3.14 ms busy step, 33%, at
  # ~23% of the read ceiling). "triton_prefetch" streams gate and up in one loop, FETCH_DEPTH chunks ahead; the
  # arithmetic is unchanged, so bit-identity to triton_lastblock is the claim. Its GPU tests first (bitwise at
  # depths 1-3, eagerly and replayed from graphs; the decode paths timed side by side), then the depth studies;
  # a failed test leaves its rungs out
  proof_prefetch
  # SUITE_TESTS_PASSED="gpu-tests-prefetch": those tests passed in an earlier call on the same kernels (a fresh machine
  # with too little time left to run them again; the write-up names that call), so the rungs may run without them
  PF_OK=$({ [ "$(marker $DONE/gpu-tests-prefetch)" = 0 ] || \
    [[ " ${SUITE_TESTS_PASSED:-} " == *" gpu-tests-prefetch "* ]]; } && echo 1)
  [ -n "$PF_OK" ] && [ -f $CONV_REG ] && [ ! -f $MOEPF_REG ] && run swap-moe-prefetch 30 bash -c 'swap_into "$@"' _ \
      $MOEPF_REG $CONV_REG moe_experts=triton_prefetch
  [ -n "$PF_OK" ] && [ -f $MOEPF_REG ] && run decode-moe-prefetch 100 sparkops bench decode --model $M --depth 0 \
      --tokens 64 --repeats 6 --registry $CONV_REG --vs $MOEPF_REG --graph A,B $GATE $FILL_LEAN \
      --change "moe_experts=triton_prefetch: gate and up GEMVs in one loop, $(depth_of moe_experts) chunk(s) in flight (lastblock conv fused bf16 registry, graph)"
  # the same deeper stream in linear (the lm_head's programs walk 9 chunks each; a split GEMV's 2 or 3)
  [ -n "$PF_OK" ] && [ -f $MOEPF_REG ] && [ ! -f $LINPF_REG ] && run swap-linear-prefetch 30 bash -c 'swap_into "$@"' _ \
      $LINPF_REG $MOEPF_REG linear=triton_prefetch
  [ -n "$PF_OK" ] && [ -f $LINPF_REG ] && timed decode-moe-prefetch && run decode-linear-prefetch 100 sparkops bench \
      decode --model $M --depth 0 --tokens 64 --repeats 6 --registry $MOEPF_REG --vs $LINPF_REG --graph A,B $GATE \
      $FILL_LEAN --change "linear=triton_prefetch: $(depth_of linear) chunks of weight loads in flight per GEMV program (moe prefetch registry, graph)"
  # the router's logits GEMV with every D tile's loads issued up front (session 7, not yet on a GPU when written:
  # session 6's router took 11.7 us a layer, 26 layers, 9% of the busy step); over the moe prefetch registry
  [ -n "$PF_OK" ] && [ -f $MOEPF_REG ] && [ ! -f $ROUTPF_REG ] && run swap-router-prefetch 30 bash -c 'swap_into "$@"' _ \
      $ROUTPF_REG $MOEPF_REG moe_router=triton_prefetch
  [ -n "$PF_OK" ] && [ -f $ROUTPF_REG ] && timed decode-moe-prefetch && run decode-router-prefetch 100 sparkops bench \
      decode --model $M --depth 0 --tokens 64 --repeats 6 --registry $MOEPF_REG --vs $ROUTPF_REG --graph A,B $GATE \
      $FILL_LEAN --change "moe_router=triton_prefetch: the logits GEMV issues every D tile's loads before its first multiply (moe prefetch registry, graph)"
  # the split-K attention's combine on N x 4 programs, empty splits neither written nor read (session 7, not yet on a
  # GPU when written): at depth 0 attention took 0.35 ms of the 3.2 ms step (7 layers, ~49 us each for ~17 MB), its
  # combine 32 programs deep in ~34 dependent round trips; bit-identical to triton_splitk. Timed at 0 and 32768 (at
  # depth each of the 4 groups re-reads its head's partials)
  proof_wide
  WIDE_OK=$({ [ "$(marker $DONE/gpu-tests-wide)" = 0 ] || \
    [[ " ${SUITE_TESTS_PASSED:-} " == *" gpu-tests-wide "* ]]; } && echo 1)
  WIDE_BASE=$(now_reg decode-attn-wide)
  fresh_over $WIDE_REG $WIDE_BASE
  [ -n "$WIDE_OK" ] && [ ! -f $WIDE_REG ] && run swap-attn-wide 30 bash -c 'swap_into "$@"' _ $WIDE_REG $WIDE_BASE \
      attention=triton_splitk_wide
  [ -n "$WIDE_OK" ] && [ -f $WIDE_REG ] && run decode-attn-wide 140 sparkops bench decode --model $M --depth 0,32768 \
      --tokens 64 --repeats 6 --registry $WIDE_BASE --vs $WIDE_REG --graph A,B $GATE $FILL_LEAN --changes attention \
      --change "attention=triton_splitk_wide: the decode combine on N x 4 programs, empty splits skipped, over $(basename $WIDE_BASE), graph"
  # the flat Q4_K GEMVs (session 7, not yet on a GPU when written): the byte-form Q4_K GEMV's chunk loop compiles to 16
  # barriers (8 layout changes through shared memory), the flat form's to none. Its GPU tests (accuracy at the 48B
  # shapes, timed against lastblock / prefetch) and tile studies first; then moe_experts, then linear, each its own
  # row over the step now
  proof_flat
  FLAT_OK=$({ [ "$(marker $DONE/gpu-tests-flat)" = 0 ] || \
    [[ " ${SUITE_TESTS_PASSED:-} " == *" gpu-tests-flat "* ]]; } && echo 1)
  FLAT_BASE=$(now_reg decode-moe-flat)
  fresh_over $FLATMOE_REG $FLAT_BASE
  [ -n "$FLAT_OK" ] && [ ! -f $FLATMOE_REG ] && run swap-moe-flat 30 bash -c 'swap_into "$@"' _ $FLATMOE_REG $FLAT_BASE \
      moe_experts=triton_flat
  [ -n "$FLAT_OK" ] && [ -f $FLATMOE_REG ] && run decode-moe-flat 100 sparkops bench decode --model $M --depth 0 --tokens 64 \
      --repeats 6 --registry $FLAT_BASE --vs $FLATMOE_REG --graph A,B $GATE $FILL_LEAN \
      --change "moe_experts=triton_flat: Q4_K expert GEMVs in the flat form (no barrier in the chunk loop), over $(basename $FLAT_BASE), graph"
  [ -n "$FLAT_OK" ] && [ -f $FLATMOE_REG ] && [ ! -f $FLATLIN_REG ] && run swap-linear-flat 30 bash -c 'swap_into "$@"' _ \
      $FLATLIN_REG $FLATMOE_REG linear=triton_flat
  [ -n "$FLAT_OK" ] && [ -f $FLATLIN_REG ] && run decode-linear-flat 100 sparkops bench decode --model $M --depth 0 \
      --tokens 64 --repeats 6 --registry $FLATMOE_REG --vs $FLATLIN_REG --graph A,B $GATE $FILL_LEAN \
      --change "linear=triton_flat: Q4_K projection GEMVs in the flat form, over the moe flat registry, graph"
  NOW_REG=$(now_reg); log "the step now: $NOW_REG"
  [ -f $NOW_REG ] && run gate-captured-now 30 sparkops check --model k3-nano --registry $NOW_REG --device cuda --captured
  run diagnose-now7 60 sparkops diagnose --model $M --device cuda --depth 0 --registry $NOW_REG $FILL_LEAN \
      --out "$R/diag-now" --json-out $DJ/diag-now7.json --record --bench-dir $B
  ;;
tests1of2|tests2of2)  # half of the single-GPU test files each, balanced by the seconds they took last time
  # (bench/gpu_test_shard.py, bench/gpu-test-seconds.json): one stage per lane of a two-GPU machine
  part=${stage#tests}; part=${part/of//}
  files=$(python3 bench/gpu_test_shard.py "$part") && [ -n "$files" ] || {
    log "SKIP gpu-$stage: bench/gpu_test_shard.py $part gave no test files"; continue; }
  # shellcheck disable=SC2086 # a word list of test files
  # --timeout (pytest-timeout, on the image): a test that hangs fails by name and the shard goes on (session 16: both
  # shards ran out the lane's budget with no JUnit file, and the log's dots did not say which test was running)
  # SPARKOPS_PEROP_DIR: the side-by-side tests' records (perop-*.json) are kept and go into the ledger (pack)
  run gpu-$stage 60 env SPARKOPS_PEROP_DIR="$DJ" python3 -m pytest -q -rP -m gpu -p no:cacheprovider \
      --timeout=$GPU_TEST_TIMEOUT $files --junitxml="$R/gpu-$stage.xml" ;;
tests)    # every GPU visible (the NCCL tests need two), this lane's own GPU first: the single-GPU tests run there
  # and not on the GPU where the other lane is timing decode
  # -rP: the passed tests' printed timings go into the log too (session 5's were swallowed by the capture)
  # GPU_TESTS picks files (default: all of tests/)
  # GPU_TESTS_K: a -k expression (e.g. leaving out what stage proofs7 ran in this call)
  run gpu-tests 60 env $(lane_gpus_first) python3 -m pytest -q -rP -m gpu -p no:cacheprovider --timeout=$GPU_TEST_TIMEOUT \
      ${GPU_TESTS:-tests} \
      ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} --junitxml="$R/gpu-tests.xml" ;;
opbench)
  # one pytest run and one JSON per file, the files the targets read first, so that a run stopped at the budget
  # keeps what finished (session 3: all ~570 cases in one run took over 9 minutes and returned nothing)
  OPB="python3 -m pytest -q -p no:cacheprovider --benchmark-only --benchmark-group-by=group --benchmark-max-time=0.2 --timeout=180"  # pytest-timeout: on the image
  # OPBENCH_FILES picks the files (default all; session 5 needs "attention ops": the rest are in the ledger)
  for f in ${OPBENCH_FILES:-linear attention kda cupy ops}; do
    sel=""; [ $f = ops ] && sel="-k kimi-linear-48b"  # the 48B's shapes (k3-nano's are for the CPU)
    run opbench-$f 45 $OPB bench/test_bench_$f.py $sel --benchmark-json="$R/opbench-$f.json"
    [ -s "$R/opbench-$f.json" ] && run opbench-ledger-$f 5 sparkops ledger opbench "$R/opbench-$f.json" \
        --bench-dir "$B" --command "$OPB bench/test_bench_$f.py $sel --benchmark-json=opbench-$f.json"
  done
  ;;
tune)      # launch-shape studies of the Triton kernels (timed, each checked against the default's output); the log
  # is the input for the defaults in the kernel modules. TUNE_STUDIES picks them (default: the decode GEMVs)
  run tune 60 python3 -m sparkops_triton._tune ${TUNE_STUDIES:-lm_head_q6k linear_q6k_small router_gemv linear_gemv moe_decode} ;;
iq1s)
  prereq || continue
  [ -f $M1 ] || run synth48-iq1s 150 sparkops synth --preset kimi-linear-48b-a3b --quant iq1_s -o $M1
  run generate48-iq1s-torch 60 sparkops generate --model $M1 --device cuda -n 16 --registry $TORCH_REG
  run generate48-iq1s-fast-graph 60 sparkops generate --model $M1 --device cuda -n 64 --registry $FAST_REG --graph
  run gate48-iq1s-fast 60 sparkops check --model $M1 --registry $FAST_REG --golden-registry $TORCH_REG --device cuda \
      --depths 1,64
  ;;
frontier131k)  # issue #10's rows at 131072, where the frontier is sessions 8-9's steps (Q4_K 331.0, IQ1_S 296.6 tok/s):
  # session 22's step (made by swaps; session 23's over it when SUITE_TIMED names decode-s23-nones) or the newest
  # timed registry after it, one CUDA graph per step, one arm
  # against the frontier, for the Q4_K mix and then the IQ1_S mix (its own 48B, synthesized once, gated on itself)
  now_step frontier131k || continue
  run decode131k-now 200 sparkops bench decode --model $M --depth 131072 --tokens 16 --repeats 6 --chunk 4096 \
      --registry $NOW_REG --graph A $GATE $FILL_LEAN \
      --change "the step now ($(basename $NOW_REG)), one CUDA graph per step, at 131072"
  [ -f $M1 ] || run synth48-iq1s 150 sparkops synth --preset kimi-linear-48b-a3b --quant iq1_s -o $M1
  # the IQ1_S experts keep a kernel that reads their blocks: the step's one-token Q4_K expert kernels pass every
  # other type to the float32 path by their stated policy (session 25: 6.5 tok/s under $NOW_REG itself)
  IQ1S_REG=${NOW_REG%.toml}-iq1s.toml
  fresh_over $IQ1S_REG $NOW_REG
  [ -f $IQ1S_REG ] || run swap-now-iq1s-experts 40 bash -c 'swap_into "$@"' _ $IQ1S_REG $NOW_REG \
      moe_experts@IQ1_S=triton_prefetch
  if [ -f $IQ1S_REG ] && ! python3 bench/registry_selects.py $IQ1S_REG moe_experts@IQ1_S=triton_prefetch > /dev/null; then
    log "decode131k-iq1s-now: left out ($(basename $IQ1S_REG) does not select moe_experts@IQ1_S=triton_prefetch)"
    rm -f $IQ1S_REG
  fi
  [ -f $M1 ] && [ -f $IQ1S_REG ] && run decode131k-iq1s-now 200 sparkops bench decode --model $M1 --depth 131072 \
      --tokens 16 --repeats 6 --chunk 4096 --registry $IQ1S_REG --graph A $GATE $FILL_LEAN \
      --change "the step now ($(basename $NOW_REG)) with moe_experts@IQ1_S=triton_prefetch, one CUDA graph per step (IQ1_S mix)"
  ;;
rungs_iq1s)  # sessions 50-51: issue #10's IQ1_S row (>= 1000 tok/s at 131072; 317.4 now): the step's IQ1_S GEMVs moved
  # from cupy_float (the float-activation kernel the Q4_K GEMVs pass IQ1_S to) to the fastest of the Q8 row-copy forms
  # over the IQ1_S grid in probe_iq1s's figures (run first; the grid in global or shared memory, 16 rows a block or
  # short weights 8), one two-arm row at 131072 on the IQ1_S 48B predicted from those figures; then the experts the
  # same way over that
  [ "$(marker $DONE/gpu-tests-iq1s)" = 0 ] && [ -s $DJ/probe-iq1s.json ] \
    || { log "decode131k-iq1s-gemv: left out (probe_iq1s's GPU tests and figures first: name probe_iq1s before it)"; continue; }
  # SUITE_IQ1S_LINEAR=NAME pins the GEMV form (the one a rung already won with: its registry is then the experts'
  # base whatever this call's probe ranks first among near-equal forms); otherwise the probe's fastest
  IQ1S_BEST=$(python3 bench/probes/iq1s_ops.py --best $DJ/probe-iq1s.json linear \
      ${SUITE_IQ1S_LINEAR:-cupy_rowwarp_pdl_q8_iq1s cupy_rowwarp_pdl_q8_iq1s_short cupy_rowwarp_pdl_q8_iq1s_sg \
      cupy_rowwarp_pdl_q8_iq1s_sg_short cupy_rowwarp_pdl_q8_iq1s_sg_mixed cupy_rowwarp_pdl_q8_iq1s_t2 \
      cupy_rowwarp_pdl_q8_iq1s_t2_rows16} --above 1) \
    || { log "decode131k-iq1s-gemv: left out (no per-op factor above 1 from probe_iq1s)"; continue; }
  read -r IQ1S_LIN IQ1S_EXPECT <<< "$IQ1S_BEST"  # "IMPL linear@IQ1_S=FACTOR"
  IQ1S_WHY="the fastest Q8 form per op"; [ -n "${SUITE_IQ1S_LINEAR:-}" ] && IQ1S_WHY="pinned by SUITE_IQ1S_LINEAR"
  log "rungs_iq1s: linear@IQ1_S=$IQ1S_LIN, $IQ1S_WHY ($IQ1S_EXPECT)"
  now_step rungs_iq1s || continue
  [ -f $M1 ] || run synth48-iq1s 150 sparkops synth --preset kimi-linear-48b-a3b --quant iq1_s -o $M1
  IQ1S_REG=${NOW_REG%.toml}-iq1s.toml
  fresh_over $IQ1S_REG $NOW_REG
  [ -f $IQ1S_REG ] || run swap-now-iq1s-experts 40 bash -c 'swap_into "$@"' _ $IQ1S_REG $NOW_REG \
      moe_experts@IQ1_S=triton_prefetch
  Q8I_REG=${IQ1S_REG%.toml}-${IQ1S_LIN#cupy_rowwarp_pdl_}.toml
  fresh_over $Q8I_REG $IQ1S_REG
  [ -f $Q8I_REG ] || run swap-iq1s-gemv 40 bash -c 'swap_into "$@"' _ $Q8I_REG $IQ1S_REG linear@IQ1_S=$IQ1S_LIN
  iq1s_pair decode131k-iq1s-gemv iq1s-131k $IQ1S_REG $Q8I_REG linear@IQ1_S=$IQ1S_LIN swap-iq1s-gemv \
      "linear@IQ1_S=$IQ1S_LIN: the IQ1_S GEMVs on Q8 activations (the Q4_K step's row-copy form over the IQ1_S grid; the fastest such form in probe_iq1s), over $(basename $IQ1S_REG), one CUDA graph per step (IQ1_S mix)"
  # then the experts (moe_experts@IQ1_S, triton_prefetch -> the fastest Q8 pair per op) over that registry: its own
  # row, left out where the probe has none faster per op (session 50: the row-copy pair x0.785)
  IQ1S_BEST=$(python3 bench/probes/iq1s_ops.py --best $DJ/probe-iq1s.json moe_experts cupy_rowwarp_pdl_q8_iq1s \
      cupy_rowwarp_pdl_q8h_iq1s cupy_rowwarp_pdl_q8h_iq1s_sg cupy_rowwarp_pdl_q8h_iq1s_staged \
      cupy_rowwarp_pdl_q8h_iq1s_staged_pair cupy_rowwarp_pdl_q8h_iq1s_staged_flat cupy_rowwarp_pdl_q8h_iq1s_t2 \
      --above 1) \
    || { log "decode131k-iq1s-experts: left out (no per-op factor above 1 from probe_iq1s)"; continue; }
  read -r IQ1S_EXP IQ1S_EXPECT <<< "$IQ1S_BEST"
  log "rungs_iq1s: moe_experts@IQ1_S=$IQ1S_EXP, the fastest Q8 pair per op ($IQ1S_EXPECT)"
  Q8E_REG=${Q8I_REG%.toml}-${IQ1S_EXP#cupy_rowwarp_pdl_}.toml
  fresh_over $Q8E_REG $Q8I_REG
  [ -f $Q8I_REG ] && [ ! -f $Q8E_REG ] && run swap-iq1s-experts 40 bash -c 'swap_into "$@"' _ $Q8E_REG $Q8I_REG \
      moe_experts@IQ1_S=$IQ1S_EXP
  iq1s_pair decode131k-iq1s-experts iq1s-gemv-131k $Q8I_REG $Q8E_REG moe_experts@IQ1_S=$IQ1S_EXP swap-iq1s-experts \
      "moe_experts@IQ1_S=$IQ1S_EXP: the IQ1_S experts on Q8 activations (the fastest Q8 pair in probe_iq1s), over $(basename $Q8I_REG), one CUDA graph per step (IQ1_S mix)"
  # then (session 52) the GEMVs again over that step: the fastest other form per op against the one the first rung
  # put there (--over: sg_mixed, the o_proj on the global grid; or the t2 repacking), its own row over the experts'
  # registry; left out where the experts' swap made none or no form is faster than the step's per op
  [ -f $Q8E_REG ] || { log "decode131k-iq1s-gemv2: left out (no experts registry to stand on)"; continue; }
  IQ1S_BEST=$(python3 bench/probes/iq1s_ops.py --best $DJ/probe-iq1s.json linear cupy_rowwarp_pdl_q8_iq1s_sg_mixed \
      cupy_rowwarp_pdl_q8_iq1s_t2 cupy_rowwarp_pdl_q8_iq1s_t2_rows16 cupy_rowwarp_pdl_q8_iq1s_sg_short \
      cupy_rowwarp_pdl_q8_iq1s_sg --over $IQ1S_LIN --above 1) \
    || { log "decode131k-iq1s-gemv2: left out (no GEMV form faster per op than $IQ1S_LIN)"; continue; }
  read -r IQ1S_LIN2 IQ1S_EXPECT <<< "$IQ1S_BEST"
  log "rungs_iq1s: linear@IQ1_S=$IQ1S_LIN2 over $IQ1S_LIN, the fastest other GEMV per op ($IQ1S_EXPECT)"
  Q8L_REG=${Q8E_REG%.toml}-${IQ1S_LIN2#cupy_rowwarp_pdl_}.toml
  fresh_over $Q8L_REG $Q8E_REG
  [ -f $Q8L_REG ] || run swap-iq1s-gemv2 40 bash -c 'swap_into "$@"' _ $Q8L_REG $Q8E_REG linear@IQ1_S=$IQ1S_LIN2
  iq1s_pair decode131k-iq1s-gemv2 iq1s-experts-131k $Q8E_REG $Q8L_REG linear@IQ1_S=$IQ1S_LIN2 swap-iq1s-gemv2 \
      "linear@IQ1_S=$IQ1S_LIN2: the IQ1_S GEMVs from $IQ1S_LIN to the fastest other form in probe_iq1s, over $(basename $Q8E_REG), one CUDA graph per step (IQ1_S mix)"
  ;;
proofs_fp8)  # session 53: the fp8 attention's GPU tests alone (rungs_fp8's first step): bits, graph, the side-by-side
  proof_fp8 ;;
rungs_fp8)  # session 53: the MLA cache in float8_e4m3fn (sparkops/kvcache.py), read by
  # attention=cupy_splitk_fp8_deep_active_pdl (written without a GPU): its GPU tests, then one two-arm row at 131072 on
  # the Q4_K 48B - the step now against the same step with the fp8 attention (B's cache fp8 by its attention's claim;
  # B's context the bf16 fill's rows rounded to fp8, the bench's stated policy) - and the same on the IQ1_S 48B over
  # the newest IQ1_S step on the machine (SUITE_FP8_IQ1S_BASE names another), each base diagnosed at 131072 first.
  # Predicted by the GPU tests' side-by-side record at 131072 (perop-attnfp8-bfloat16.json: the op a token under each
  # form); without one, by bytes: the split streams half the cache, and session 51's diagnosis at 131072 (H100) had
  # the op at 0.535 ms a token, its split 0.432 of it: 0.535 / (0.535 - 0.432 / 2) = x1.68 (SUITE_FP8_EXPECT)
  proof_fp8
  attention_rungs fp8 cupy_splitk_fp8_deep_active_pdl attnfp8 "${SUITE_FP8_EXPECT:-}" 1.68 \
      "the MLA cache in float8_e4m3fn (half the bytes the split streams)" "${SUITE_FP8_IQ1S_BASE:-}" || continue
  ;;
proofs_twin)  # session 54: the twin split's GPU tests alone (rungs_twin's first step): bits, graph, the side-by-side
  proof_twin ;;
proofs_bulk)  # session 54: the bulk split's GPU tests alone (rungs_bulk's first step): bits, graph, the side-by-side
  proof_bulk ;;
rungs_split)  # session 55: whichever of the qreg, bulk, fp8 qreg, L2-prefetching and ring splits is the fastest per
  # op by its side-by-side record (proofs_qreg / _bulk / _fp8_qreg / _l2pf / _ring on this machine, which must have
  # passed), if at least x$SUITE_SPLIT_MIN (default 1.05: the split is ~19% of the IQ1_S step at 131072, so less per
  # op is under the rows' noise), timed as its rungs stage: the Q4_K pair over the step now, then the IQ1_S pair over
  # SUITE_SPLIT_IQ1S_BASE (the IQ1_S 48B made first)
  split_tag=$(split_pick) || continue
  [ -n "${SUITE_SPLIT_IQ1S_BASE:-}" ] && [ ! -f $M1 ] && \
    run synth48-iq1s 60 sparkops synth --preset kimi-linear-48b-a3b --quant iq1_s -o $M1
  attention_rungs $split_tag ${SPLIT_IMPL[$split_tag]} attn$split_tag "" "" "${SPLIT_TEXT[$split_tag]}" \
      "${SUITE_SPLIT_IQ1S_BASE:-}" || continue
  ;;
proofs_fp8_qreg)  # session 55: the fp8 queries-in-registers split's GPU tests alone: the reference on the fp8 values,
  # graph, the side-by-side record (bf16, fp8 one-group, fp8 qreg), Nsight Compute on the one-group and fp8 qreg split
  proof_fp8_qreg ;;
proofs_ring)  # session 55: the ring split's GPU tests alone: the qreg split's bits, graph, the side-by-side record,
  # Nsight Compute on it
  proof_ring ;;
proofs_l2pf)  # session 55: the L2-prefetching split's GPU tests alone: the one-group split's bits, graph, the
  # side-by-side record, Nsight Compute on it
  proof_l2pf ;;
proofs_qreg)  # session 55: the queries-in-registers split's GPU tests alone (rungs_qreg's first step): the reference,
  # graph, the side-by-side record, Nsight Compute on both splits
  proof_qreg ;;
rungs_qreg)  # session 55: attention=cupy_splitk_bf16_qreg_active_pdl (mla_split_qreg: each warp's quarter of the queries
  # in registers, a tile's scores reading only the tile; it tied per op in session 55, x0.998 at 131072, so the plan
  # leaves it out): its GPU tests, then the pairs at 131072 on both mixes as rungs_twin's (SUITE_QREG_IQ1S_BASE names
  # the IQ1_S base), from the tests' side-by-side record (perop-attnqreg); none: out
  proof_qreg
  attention_rungs qreg cupy_splitk_bf16_qreg_active_pdl attnqreg "" "" \
      "the queries-in-registers split (each warp's quarter of the queries held in registers)" \
      "${SUITE_QREG_IQ1S_BASE:-}" || continue
  ;;
rungs_bulk)  # session 54: attention=cupy_splitk_bf16_bulk_active_pdl (mla_split_bulk: each tile by one bulk copy a row,
  # the one-group split's bits; written without a GPU): its GPU tests, then the pairs at 131072 on both mixes as
  # rungs_twin's (SUITE_BULK_IQ1S_BASE names the IQ1_S base), from the tests' side-by-side record (perop-attnbulk)
  proof_bulk
  attention_rungs bulk cupy_splitk_bf16_bulk_active_pdl attnbulk "" "" \
      "the bulk split (each tile's rows by the copy engine, one bulk copy a row)" "${SUITE_BULK_IQ1S_BASE:-}" \
    || continue
  ;;
rungs_twin)  # session 54: attention=cupy_splitk_bf16_twin_active_pdl (mla_split_twin: two groups of 8 warps a block,
  # each streaming its own tiles; it tied per op in session 54, x0.987 at 131072, so the plan leaves it out): its GPU
  # tests, then one two-arm row at 131072 on the Q4_K 48B over the step now and one on the IQ1_S 48B over
  # SUITE_TWIN_IQ1S_BASE (else the newest IQ1_S step on the machine), each base diagnosed at 131072 first, predicted
  # by the tests' side-by-side record (perop-attntwin); with no record the rows are left out (no forecast by bytes:
  # the split's bytes do not change)
  proof_twin
  attention_rungs twin cupy_splitk_bf16_twin_active_pdl attntwin "" "" \
      "the twin split (two groups of 8 warps a block, each streaming its own tiles)" "${SUITE_TWIN_IQ1S_BASE:-}" \
    || continue
  ;;
frontier_now)  # issue #10's rows at 0 and 32768 under the step now, one arm against the frontier: the figures of a
  # step whose rungs were timed on another machine kind (an H200's frontier stood at s49 while the H100 timed s52 and
  # s55). Each rung SUITE_TIMED names is made by its swaps here first, so each change is proven on this machine; the
  # row is the step's figure, not a rung (no pair, no --changes: its gain over the frontier is no change's tier)
  now_step frontier_now || continue
  run decode-now 240 sparkops bench decode --model $M --depth 0,32768 --tokens 64 --repeats 6 --registry $NOW_REG \
      --graph A $GATE $FILL_LEAN --change "the step now ($(basename $NOW_REG)), one CUDA graph per step"
  ;;
iq1s131k)
  prereq_lean || continue
  [ -f $FILL_REG ] && FILL_LEAN=$FILL
  [ -f $M1 ] || run synth48-iq1s 60 sparkops synth --preset kimi-linear-48b-a3b --quant iq1_s -o $M1
  # issue #10's IQ1_S target (>= 1000 tok/s at 131072; llama.cpp 196): the newest timed registry, one CUDA graph
  # per step, against the frontier (gated on the IQ1_S model itself). SUITE_IQ1S_REG names the IQ1_S step instead (a
  # registry on the machine, e.g. the carried one rungs_iq1s won: the step now's IQ1_S selections are not its own)
  if [ -n "${SUITE_IQ1S_REG:-}" ]; then
    NOW_REG=$SUITE_IQ1S_REG
    [ -f $NOW_REG ] || { log "decode131k-iq1s: left out (SUITE_IQ1S_REG=$NOW_REG is not on this machine)"; continue; }
    IQ1S_WHAT="the IQ1_S step now ($(basename $NOW_REG), SUITE_IQ1S_REG)"
  else NOW_REG=$(now_reg); IQ1S_WHAT="the newest timed registry ($(basename $NOW_REG))"; fi
  log "the step now: $NOW_REG"
  [ -f $M1 ] && run decode131k-iq1s 200 sparkops bench decode --model $M1 --depth 131072 --tokens 16 --repeats 6 \
      --chunk 4096 --registry $NOW_REG --graph A $GATE $FILL_LEAN \
      --change "$IQ1S_WHAT, one CUDA graph per step (IQ1_S mix)"
  ;;
attn131k)
  prereq_lean || continue
  [ -f $FILL_REG ] && FILL_LEAN=$FILL
  # cupy's bf16 split-K attention in the newest timed registry at 131072 (23% of the step's busy time there in
  # session 5's diagnosis; per op 0.154 -> 0.092 ms): session 6's first try stopped at the budget in its fill
  NOW_REG=$(now_reg); ATT_REG=${NOW_REG%.toml}-cupy-attn.toml
  [ -f $ATT_REG ] || run swap-now-cupy-attn 20 bash -c 'swap_into "$@"' _ $ATT_REG $NOW_REG attention=cupy_splitk_bf16
  S5=bench/gpu-runs/2026-11-29-session5
  [ -f $ATT_REG ] && run decode131k-cupy-attn 330 sparkops bench decode --model $M --depth 131072 --tokens 64 \
      --repeats 6 --chunk 4096 --registry $NOW_REG --vs $ATT_REG --graph A,B $GATE $FILL_LEAN \
      --prediction $S5/diag-best-131k.json --expect attention@131072=1.67 \
      --change "attention=cupy_splitk_bf16 vs triton_splitk (bf16 cache), newest timed registry, graph"
  ;;
parallel)
  prereq || continue
  # the sharded 48B against one GPU on the same weights and registry (the gate of every figure below)
  run par-check48 90 sparkops parallel check --model $M --world 2 --device cuda --registry $FAST_REG --depths 1,64
  run par-scaling48 90 sparkops parallel scaling --model $M --worlds 1,2 --depth 4096 --device cuda \
      --registry $FAST_REG --steps 8 --rounds 5 --chunk 4096
  run par-bench48 150 sparkops parallel bench --model $M --world 2 --device cuda --registry $FILL_REG \
      --prefill 32768 --depth 32768 --chunk 4096 --steps 16 --rounds 5 --record --bench-dir $B
  # weights drawn on each GPU, no file (what k3-2.8t needs on 8 GPUs), at the 48B's shape and an IQ1_S mix
  run par-bench48-ondevice 90 sparkops parallel bench --model kimi-linear-48b-a3b --source ondevice --mix ud_iq1_s \
      --world 2 --device cuda --registry $FILL_REG --prefill 4096 --depth 4096 --chunk 4096 --record --bench-dir $B
  ;;
*) log "unknown stage $stage" ;;
esac; done
log "done"
