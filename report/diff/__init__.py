"""The differential report: two profiles compared, in four modules.

``compare``: the union of both sides' stacks and the changes between them (``Diff``);
``normalise``: how each side's raw weights become comparable numbers, with their noise floor;
``text``: the diff's text form (terminals, CI logs) and JSON form (machines);
``page``: the self-contained HTML page.
"""
