"""A P99 finding's evidence as three to five sentences a person reads, with units: where it lies in
the tail, up to three sentences of the numbers behind it, and the next step. The analyzers return
the numbers (analyzers/triage/contracts.py, Finding.evidence); the words are here. Every number
stays in diagnosis_p99.json and the report's Diagnosis table (reports/evidence_units.py).

sentences.py puts them together (evidence_sentences); where.py says where the finding lies; one
module per kind of evidence holds its sentence builders: contrasts.py (tail against body, spikes
against calm, a condition held throughout), fleet.py, server.py, host.py; phrasing.py the words
for numbers they share.
"""
