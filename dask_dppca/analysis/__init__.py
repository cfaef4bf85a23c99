"""The private analysis: directions, scree and score map under one budget.

:mod:`.run` (``analyze`` and the result), :mod:`.plan` (``plan_analysis``),
:mod:`.stages` (one module per stage), :mod:`.plots`, :mod:`.report` (the HTML report).
"""
