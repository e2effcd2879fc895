"""A traceback whose first frame line was cut (a log truncated mid-path, the next log's
line glued on) has a source line recorded under no frame: building it must not fail.
(Seen on the 1 GiB `real` benchmark mix, a concatenation of the corpus logs: diag analyze
raised IndexError in ``_Proc.build``.)"""

from diag.stacks.textdump import _Proc, _Thread


def test_call_line_under_no_frame_builds() -> None:
    proc = _Proc(kind="traceback", source="log.txt", line=3)
    proc.threads.append(_Thread(tid=None, name=None, status=None, outer_first=True))
    proc.threads[0].calls[-1] = 'File "/usr/lib/python3.10/multiprocessing/pr'
    assert proc.build() is None  # no frame: nothing to report, and no IndexError
