"""What results are shown as: figures, reports, exports, renders and saliency maps."""
