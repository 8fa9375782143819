"""The CI gate (``wallflame check``): each side's runs (``series``, ``slicefile``), the
quantities judged (``quantities``), their statistics (``stats``), the verdict (``check``) and
its outputs (``output``)."""
