"""Stack analysis shared by `diag analyze` (dumps found in text) and `diag snapshot` (live
py-spy dumps): parse, classify, merge.

- :mod:`diag.stacks.textdump` — py-spy text, faulthandler, pystack and Ctrl-C traceback
  dumps in a stream of records (``extract_stack_processes``);
- :mod:`diag.stacks.pyspy_json` — ``py-spy dump --json`` output (``parse_pyspy_json``);
- :mod:`diag.stacks.classify` — the wait-site rule table, the thread that matters, GPU
  facts and kernel wait channels (``classify_process``, ``apply_gpu_facts``,
  ``classify_wchan``);
- :mod:`diag.stacks.merge` — STAT-style equivalence classes, prefix tree and the odd ranks
  out (``group_stacks``, ``build_tree``, ``outliers``, ``outlier_tp_ranks``);
- :mod:`diag.stacks.frames` — frame lines, native frames, ranks from process titles.
"""

__all__: list[str] = []
