"""The parts of ``trionsq top`` (:mod:`trionsq.top`): its state and reducer, the view
and the stream client, each testable without a terminal or a socket."""
