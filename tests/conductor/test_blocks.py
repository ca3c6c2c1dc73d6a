"""The `<tandem_memory>` block scanner and parser."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conductor.writing.blocks import (
    MAX_BLOCK_CHARS,
    Block,
    BlockRefusal,
    BlockRequest,
    BlockScanner,
    TextPiece,
    parse_block,
)

BLOCK = ('<tandem_memory op="add" scope="project" kind="gotcha">\ntitle: the build needs node 20\n'
         'tags: build, node\n\nnpm run build fails on node 18.\n</tandem_memory>')
ANSWER = f"Noted, <b>really</b>. {BLOCK} Anything else? <tandem"


def scan(pieces: list[str], scanner: BlockScanner | None = None) -> list[TextPiece | Block]:
    scanner = scanner or BlockScanner()
    events: list[TextPiece | Block] = []
    for piece in pieces:
        events += scanner.feed(piece)
    return events + scanner.finish()


def text_of(events) -> str:
    return "".join(e.text for e in events if isinstance(e, TextPiece))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(ANSWER)), max_size=10))
def test_a_block_is_recognised_whatever_the_split(cuts):
    bounds = [0, *sorted(cuts), len(ANSWER)]
    events = scan([ANSWER[a:b] for a, b in zip(bounds, bounds[1:], strict=False)])
    assert [e.raw for e in events if isinstance(e, Block)] == [BLOCK]
    assert text_of(events) == "Noted, <b>really</b>.  Anything else? <tandem"


def test_every_single_split_point_gives_the_same_block():
    for at in range(len(ANSWER) + 1):
        events = scan([ANSWER[:at], ANSWER[at:]])
        assert [e.raw for e in events if isinstance(e, Block)] == [BLOCK], at


def test_an_unclosed_block_goes_out_as_text():
    events = scan(["before ", BLOCK[:-5]])
    assert not [e for e in events if isinstance(e, Block)]
    assert text_of(events) == "before " + BLOCK[:-5]


def test_a_block_over_the_size_limit_goes_out_as_text_and_scanning_resumes():
    huge = BLOCK.replace("npm run", "x" * MAX_BLOCK_CHARS)
    events = scan([huge, " then ", BLOCK])
    assert [e.raw for e in events if isinstance(e, Block)] == [BLOCK]
    assert huge in text_of(events)


def test_the_fifth_block_of_an_answer_goes_out_as_text():
    events = scan([BLOCK] * 5)
    assert len([e for e in events if isinstance(e, Block)]) == 4
    assert text_of(events) == BLOCK


def test_parse_reads_op_scope_kind_title_tags_and_body():
    request = parse_block(BLOCK)
    assert request == BlockRequest(op="add", scope="project", kind="gotcha",
                                   title="the build needs node 20", tags=("build", "node"),
                                   body="npm run build fails on node 18.")


def test_update_and_archive_carry_id_and_reason():
    update = parse_block('<tandem_memory op="update" id="n1">\ntitle: t\n\nnew\n</tandem_memory>')
    assert isinstance(update, BlockRequest) and update.note_id == "n1" and update.body == "new"
    archive = parse_block('<tandem_memory op="archive" id="n1" reason="moved"></tandem_memory>')
    assert isinstance(archive, BlockRequest) and archive.reason == "moved"


def refusal(raw: str) -> str:
    result = parse_block(raw)
    assert isinstance(result, BlockRefusal)
    return result.reason


def test_bad_blocks_are_refusals_with_reasons_not_exceptions():
    assert refusal('<tandem_memory op=add>\ntitle: t\n</tandem_memory>') == "malformed_block"
    assert refusal('<tandem_memory op="add" scope="user" kind="gotcha">\n\nbody\n'
                   '</tandem_memory>') == "missing_title"
    assert refusal('<tandem_memory op="add" scope="user" kind="poem">\ntitle: t\n'
                   '</tandem_memory>') == "unknown_kind"
    assert refusal('<tandem_memory op="add" scope="world" kind="gotcha">\ntitle: t\n'
                   '</tandem_memory>') == "unknown_scope"
    assert refusal('<tandem_memory op="erase" id="x"></tandem_memory>') == "unknown_op"
    assert refusal('<tandem_memory op="update">\ntitle: t\n</tandem_memory>') == "missing_id"
    assert refusal('<tandem_memory op="archive" id="x"></tandem_memory>') == "missing_reason"
    assert refusal('<tandem_memory op="add" colour="red">\ntitle: t\n'
                   '</tandem_memory>') == "malformed_block"
