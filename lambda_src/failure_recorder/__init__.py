"""Failure recorder: stores every dead-lettered model-step event in the failures table.

Handler string: ``failure_recorder.handler.handler``.
"""
