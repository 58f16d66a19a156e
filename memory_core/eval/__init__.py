"""Converters from public benchmark data to episode-contract records, plus their scoring labels.

They live apart from the pipeline so evaluation data enters through the same ingest contract
(DESIGN.md section 5) as real traces, and so benchmark labels can never reach a stage by accident.
"""
