"""The one markdown-it parser that every reply's Markdown shares: Textual
parses in a thread pool, so a conversation that opens parses several replies
at once. Found by the quit test: the first such burst could fail with
"none of the block rules matched" (markdown-it builds its rule lists on first
use), a traceback at startup."""

from __future__ import annotations

import sys
import threading

from markdown_it import MarkdownIt

from chat.ui.markdown_parser import markdown_parser


def test_a_new_parser_can_be_used_by_several_threads_at_once() -> None:
    failures: list[BaseException] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for _ in range(100):
            markdown_parser.cache_clear()
            parser = markdown_parser()
            start = threading.Barrier(6)

            def parse(parser: MarkdownIt = parser, start: threading.Barrier = start) -> None:
                start.wait()
                try:
                    parser.parse("A reply with *emphasis* and `code`.")
                except Exception as error:
                    failures.append(error)

            threads = [threading.Thread(target=parse) for _ in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(interval)
        markdown_parser.cache_clear()
    assert not failures, failures[0]
