"""Failure mining, clustering, variant synthesis (LLM and mutation), validation and the curriculum.

The loop's middle: a run's model failures are categorized (:mod:`.mining`), grouped (:mod:`.clustering`),
turned into proposed params aimed at each group (:mod:`.llm`, :mod:`.mutate`), checked and calibrated
(:mod:`.validate`), and recorded as train-split instances with lineage (:mod:`.pipeline`).
"""
