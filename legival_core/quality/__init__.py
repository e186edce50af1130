"""Text-quality dimensions of a reasoning trace (gCoT paper, SPEC section 6).

`group` is what a metric group is (`QualityGroup`, `register_quality_group`); `groups/` holds one
registered module per group. The maths and the model adapters: `clarity`, `cohesion` (embedding
cohesion, coherence momentum, cross-encoder), `consistency` (NLI, AlignScore and FactCC adapters,
`alignscore`), `fluency` (perplexity), `informativeness` (BERTScore, BLEURT), the Z3 logical
verification (`ir_extract` -> `z3_ir` -> `z3_compile` -> `z3_verify`), and `dimensions` (dimension
scores and the Global Index over teachers). `_local` finds a model on this machine only: nothing is
downloaded, a missing model is `Unavailable`.
"""
