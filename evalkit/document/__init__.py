"""The audit document and its vocabulary: what the audit writes and what the report, ``evalkit
diff`` and ``evalkit gate`` read.

The layer's rule: modules here import the base modules only (``evalkit.errors``,
``evalkit.jsonio``, ``evalkit.limits``, ...), never the audit, the report, the statistics or
the run store, and take plain values (an ``audit.json`` dictionary, a check's fields, a
number), never a live audit object.  So every reader of a document decides with the same
definitions the audit used to write it:

- :mod:`evalkit.document.schema`: the document's layout name and shape, and its readers;
- :mod:`evalkit.document.tiers`: the tier walk, the claim floor, the ladder, rank and drops;
- :mod:`evalkit.document.rules`: a protocol's rules apart from its labels, their hash;
- :mod:`evalkit.document.words`: sentences about numbers and the number formats.
"""

__all__: list[str] = []
