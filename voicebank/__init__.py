"""The voice bank: registered voices on disk (content ids, `meta.json`, the atomic store), what a registered voice
is to every layer, bundles that carry a voice between nodes, streamed uploads and the peers asked for unknown ids.
(The data itself lives in the `voices/` folder.)"""
