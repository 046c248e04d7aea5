"""What a run earned: results parsed from its log, ranked runs' measured numbers, the course's build files and the leaderboard."""
