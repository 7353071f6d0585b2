"""T5 encoder-decoders (T5ForConditionalGeneration): the family's code in one folder.

A family's code spans the library's layers, so each module here sits in one of them (docs/LAYOUT.md) and
imports only what that layer may; this file imports nothing, so that a low layer reading the anatomy pulls
in nothing above it:

    anatomy.py             models       the five unit kinds as a table, t5_shape, kept_units, block_weights
    modeling_t5_sliced.py  models       the standalone class a pruned T5 folder ships (stock transformers)
    scoring.py             scoring      T5_CRITERIA: NIRVANA, Taylor, magnitude, random scores; cached
    slicing.py             pruning      slice_t5 / apply_t5_plan: heads and FFN neurons per layer and kind
    checkpoint.py          checkpoints  loading a pruned T5 folder
    measure.py             measure      perplexity of a continuation given its prefix, KL, generations
    speed.py               measure      FLOPs per phase, encoder and decode speed against the FLOPs ideal
    sweep.py               search       the Sweep page on a T5
    steps.py               pipeline     score and prune: its settings checked, scored, allocated, sliced, reported

The family's rows in the per-layer tables point here: `nirvana.models.family.FAMILIES`,
`nirvana.pruning.allocation.RULES`, `nirvana.measure.family.MEASURES`, `nirvana.checkpoints.pruned.SAVED`,
`nirvana.checkpoints.facts.DESCRIBE`, `nirvana.pipeline.FAMILY_STEPS`. The method is docs/METHOD-T5.md.
"""
