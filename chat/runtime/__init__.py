"""What runs beside a chat, without Textual: the one owner of the loaded model
(`model_loader`), the daemon threads long work runs in (`background`), and how
often a streaming reply is drawn (`frame_pacing`)."""
