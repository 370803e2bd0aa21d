"""The model: typed, frozen records of the documents kbrepro writes and reads, built once and
strictly at the JSON edge, and the rules the engine applies and the verifier derives again.

A leaf package (DESIGN.md section 2): it imports nothing of kbrepro outside itself, and any
stage may import it. :mod:`.problems` holds the one Problem type, :mod:`.strict` the record
builder, :mod:`.candidates` the records of a candidate run, :mod:`.candidate_rules` the
completeness and derivation rules over them.
"""
