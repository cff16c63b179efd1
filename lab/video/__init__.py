"""The quality lab's video: the moving world's judge (judge), its text-to-video model's training (training),
and their place in `reprise models train` (build)."""
