"""Every implementation with a stated policy has cases its own code takes.

An implementation that hands some calls to other code (a one-token kernel passing a prefill chunk to torch) says
which in its policy (Implementation.policy), and the gate refuses a proof in which it handed every call on. This
test holds the op case sweeps to that in CI, without a GPU: for each such implementation registered by the
installed plugins, its policy is asked of every call of its op's cases at the pinned seeds, placed as the gate
places them for its claim. GPU session 27 found the one-token Q4_K GEMVs and experts proven on no call of their own
(the cases had 3, 17 or 24 tokens); a case sweep that loses such a case fails here, before a GPU run refuses it.
"""

from __future__ import annotations

import pytest

from sparkops.gate.cases import PINNED_SEEDS, cases_for, place
from sparkops.gate.check import resolve_claim
from sparkops.ops import OP_NAMES, get_contract
from sparkops.plugins import load_catalog

CATALOG = load_catalog()
WITH_POLICY = sorted(impl.key for op in OP_NAMES for impl in CATALOG.implementations(op).values() if impl.policy)


def test_the_plugins_state_policies():
    """The check below has something to check: the CuPy plugin's one-token kernels state theirs."""
    assert {"linear=cupy_rowwarp_pdl", "moe_experts=cupy_rowwarp_pdl_q8_hidden", "moe_router=cupy_rowwarp_pdl",
            "attention=cupy_splitk_bf16_deep"} <= set(WITH_POLICY)


@pytest.mark.parametrize("key", WITH_POLICY)
def test_its_own_code_takes_a_call_of_its_ops_cases(key):
    op, name = key.split("=")
    impl = CATALOG.get(op, name)
    policy = impl.resolve_policy()
    _, variant, _ = resolve_claim(impl, CATALOG)
    contract = get_contract(op)
    said = []
    for case in cases_for(op, PINNED_SEEDS):
        for args in place(case, contract, variant, "cpu", reference=False).calls:
            why = policy(*args)
            if why is None:
                return
            said.append(f"{case.name}: {why}")
    pytest.fail(f"{key}: its stated policy hands every call of the op's cases on - add one its code takes to "
                f"src/sparkops/ops/{op}.py:\n  " + "\n  ".join(said))
