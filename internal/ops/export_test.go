package ops

// ChatInputSeeds are the decoding seeds, for the external tests.
var ChatInputSeeds = chatInputSeeds
