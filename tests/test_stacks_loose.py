"""Hand-written frame lists (diag.stacks.loose): read only where nothing else was."""

from __future__ import annotations

from diag.analyze import analyze_text
from diag.stacks.loose import frame_list_process


def _numbered(text: str) -> list[tuple[int, str]]:
    return list(enumerate(text.splitlines(), 1))


def test_bare_symbols_with_notes_are_a_frame_list() -> None:
    text = (
        "THPVariable_dealloc\n"
        "c10::TensorImpl::~TensorImpl\n"
        "THPStorage_dealloc   <- the IPC deleter\n"
        "cudaStreamSynchronize\n"
        "cuStreamSynchronize                 <- never returns\n"
    )
    proc = frame_list_process(_numbered(text))
    assert proc is not None
    assert proc.mode == "list" and proc.line == 1
    assert proc.wait_site == "stack.cuda_sync"
    names = [f.name for f in proc.threads[0].frames]
    assert names[0] == "THPVariable_dealloc" and names[-1] == "cuStreamSynchronize"


def test_a_call_tree_is_read_outermost_first_and_a_primitive_line_is_its_callers_call() -> None:
    text = (
        "chunk_fwd (kda.py:1103)\n"
        "  └─ prepare_chunk_indices (index.py:23)\n"
        "       └─ Tensor.tolist()\n"
        "            └─ hipMemcpy D2H sync\n"
    )
    proc = frame_list_process(_numbered(text))
    assert proc is not None
    frames = proc.threads[0].frames
    assert [f.name for f in frames] == ["prepare_chunk_indices", "chunk_fwd"]
    assert frames[0].call == "Tensor.tolist()"
    assert proc.wait_site == "stack.cuda_sync"


def test_prose_is_no_frame_list() -> None:
    text = (
        "The server hangs after loading.\n"
        "I think it is in cudaStreamSynchronize but not sure.\n"
        "Restarting helps for a while.\n"
        "load_model\n"
    )
    assert frame_list_process(_numbered(text)) is None
    # two frames are no list either
    assert frame_list_process(_numbered("cudaStreamSynchronize\ncuStreamSynchronize\n")) is None


def test_the_analyser_reads_a_frame_list_only_where_nothing_else_was() -> None:
    listing = "update_weights\nTHPStorage_dealloc\ncudaStreamSynchronize\ncuStreamSynchronize\n"
    a = analyze_text(listing, name="dump.txt")
    assert [p.wait_site for p in a.stack_processes] == ["stack.cuda_sync"]
    assert any("hand-written frame list" in n for n in a.notes)
    # the same words inside a log are the log's, not a stack
    log = "".join(
        f"INFO 05-01 10:00:0{i} [core.py:100] {w}\n" for i, w in enumerate(listing.split())
    )
    assert analyze_text(log, name="log.txt").stack_processes == ()


def test_prose_around_a_fenced_list_is_not_counted_against_it() -> None:
    """Inside a markdown code fence only the fenced lines are the list: the report's prose
    around it (a line or two, more lines than the list has frames) does not outvote it; a
    longer fence holds a text with fences of its own (CommonMark)."""
    tree = (
        "chunk_fwd (kda.py:1103)\n"
        "  └─ prepare_chunk_indices (index.py:23)\n"
        "       └─ Tensor.tolist()\n"
        "            └─ hipMemcpy D2H sync\n"
        "                 └─ hsa signal wait  ← never returns\n"
    )
    text = (
        f"It hangs in prefill here:\n\n```text\n{tree}```\n\n"
        "Is this a known issue?\nThanks for any help\n"
    )
    proc = frame_list_process(_numbered(text))
    assert proc is not None and proc.wait_site == "stack.cuda_sync"
    assert frame_list_process(_numbered(text.replace("```text\n", "").replace("```", ""))) is None
    nested = f"Reported as:\n````\nThe stack:\n```\n{tree}```\n````\nAny idea? Thanks a lot\n"
    proc = frame_list_process(_numbered(nested))
    assert proc is not None and proc.wait_site == "stack.cuda_sync"


def test_a_pyspy_frame_with_its_place_in_a_column_is_a_frame() -> None:
    """py-spy frames re-aligned into columns (`name      (file:line)`) are read as py-spy's
    own single-space form."""
    text = (
        "sched_yield        (vllm/distributed/utils.py:48)\n"
        "wait               (vllm/distributed/shm_broadcast.py:196)\n"
        "acquire_read       (vllm/distributed/shm_broadcast.py:698)\n"
    )
    proc = frame_list_process(_numbered(text))
    assert proc is not None
    assert [f.name for f in proc.threads[0].frames] == ["sched_yield", "wait", "acquire_read"]
