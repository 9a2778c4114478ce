"""XML a client sends (a PLS lexicon, an SSML document), parsed so that no document can cost more than its size.

expat reads it with every way a document reaches beyond itself refused: a DOCTYPE (so no entity is ever declared,
which stops entity expansion bombs before they start), entity declarations and external references. Depth and the
count of elements are bounded as the parser goes, so a deeply nested document is refused at the first element past
the bound. The caller bounds the document's size before parsing. What comes back is a small tree of `Element`s with
the line and column of each, for the messages a malformed document gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn
from xml.parsers import expat

from errors import InvalidInput

XML_NAMESPACE = "http://www.w3.org/XML/1998/namespace"
_SEPARATOR = "}"


class XmlError(InvalidInput):
    """A document that is not well-formed XML (`malformed_xml`, with its line and column), or one that declares
    what is never parsed (`xml_unsafe`)."""


@dataclass
class Element:
    tag: str
    """The local name (its namespace apart)."""
    namespace: str
    attrs: dict[str, str]
    """By local name; `xml:lang` and the other attributes of the XML namespace keep their `xml:` prefix."""
    line: int
    column: int
    """Where its start tag begins, both counted from 1."""
    children: list[Element | str] = field(default_factory=list)
    """Its content in order: elements and runs of text."""

    def elements(self) -> list[Element]:
        return [child for child in self.children if isinstance(child, Element)]

    def text(self) -> str:
        """All the text inside it, its elements' included."""
        return "".join(child if isinstance(child, str) else child.text() for child in self.children)


def parse_xml(document: bytes | str, what: str, max_depth: int = 32, max_elements: int = 100_000) -> Element:
    """The root element of `document` (`what` names it in messages: "the lexicon", "the SSML")."""
    parser = expat.ParserCreate(namespace_separator=_SEPARATOR)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[Element] = []
    roots: list[Element] = []
    count = 0

    def where() -> dict[str, int]:
        return {"line": parser.CurrentLineNumber, "column": parser.CurrentColumnNumber + 1}

    def unsafe(kind: str) -> NoReturn:
        spot = where()
        raise XmlError(
            f"{what} holds {kind} (line {spot['line']}, column {spot['column']}); DTDs, entities and external "
            "references are never parsed",
            code="xml_unsafe",
            detail=spot,
        )

    def start(name: str, attributes: dict[str, str]) -> None:
        nonlocal count
        count += 1
        if len(stack) >= max_depth:
            unsafe(f"elements nested deeper than {max_depth}")
        if count > max_elements:
            unsafe(f"more than {max_elements} elements")
        namespace, tag = _split(name)
        attrs = {}
        for key, value in attributes.items():
            space, local = _split(key)
            attrs[f"xml:{local}" if space == XML_NAMESPACE else local] = value
        spot = where()
        element = Element(tag, namespace, attrs, spot["line"], spot["column"])
        if stack:
            stack[-1].children.append(element)
        else:
            roots.append(element)
        stack.append(element)

    def end(name: str) -> None:
        stack.pop()

    def characters(data: str) -> None:
        if not stack:
            return
        children = stack[-1].children
        if children and isinstance(children[-1], str):
            children[-1] += data
        else:
            children.append(data)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = characters
    parser.StartDoctypeDeclHandler = lambda *args: unsafe("a DOCTYPE declaration")
    parser.EntityDeclHandler = lambda *args: unsafe("an entity declaration")
    parser.UnparsedEntityDeclHandler = lambda *args: unsafe("an unparsed entity declaration")
    parser.ExternalEntityRefHandler = lambda *args: unsafe("an external entity reference")
    try:
        parser.Parse(document, True)
    except expat.ExpatError as exc:
        message = expat.ErrorString(exc.code) if exc.code is not None else str(exc)
        line, column = exc.lineno, exc.offset + 1
        raise XmlError(
            f"{what} is not well-formed XML: {message} at line {line}, column {column}",
            code="malformed_xml",
            detail={"line": line, "column": column},
        ) from None
    return roots[0]


def _split(name: str) -> tuple[str, str]:
    namespace, _, local = name.rpartition(_SEPARATOR)
    return namespace, local
