"""What a run leaves in its folder and how every part of Harmonics reads and writes it.

A run's processes (the workers, the controller, the runner, the simulator, the analysis and
the live view) meet only through files in the run folder. Their formats and the few ways to
write and read them live here, in one place, so that no back end imports another to learn a
file's layout.
"""
