"""Distilled draft models for speculative decoding: measure one, make one.

- :mod:`~destila.draft.spec`: what ``destila eval TEACHER --draft DRAFT`` is asked (:class:`DraftEvalSpec`; light)
- :mod:`~destila.draft.counting`: teacher forwards and proposed tokens, counted by forward hooks
- :mod:`~destila.draft.measure`: the teacher alone, with the draft, and with prompt lookup, side by side
- :mod:`~destila.draft.loading`: the teacher and the draft loaded alike (a draft on another tokenizer refused)
- :mod:`~destila.draft.table`: the measurement as a table, and the note on a slow baseline
- :mod:`~destila.draft.head`: a draft head over the teacher's most frequent tokens (exact output, cheaper draft)
- :mod:`~destila.draft.size`: what a draft step costs against the teacher's, and the size that pays
- :mod:`~destila.draft.prompts`: ``pydoc`` as prompts, held out by topic
- :mod:`~destila.draft.recipe`: ``destila recipe draft``: size by measured cost, teacher-written data, KD, measure
"""
