"""The gate: no implementation runs until it has been proven against the NumPy reference on this machine.

    tolerances   THE table of metrics and thresholds (per op and claim variant; model-level rows)
    cases        pinned + fresh seeds, replayable case names, placing inputs on the device under test
    poison       fresh allocations are NaN / max-int while an implementation runs
    metrics      nmse / exact / bytes / router / sample comparisons; KL and top-1 of logits
    check        prove(impl, device, catalog) -> Outcome (passed, record, summary, report)
    records      source hashes, device and library facts, and when a record stops holding
    lockref      reference.lock: what is pinned, verify, update (the only writer), the digest
    digests      weight digests and tolerant sketches of logits rows
    model_gate   the whole model under a candidate registry against the golden logits
    calibrate    `python -m sparkops.gate.calibrate`: what honest implementations score
"""
