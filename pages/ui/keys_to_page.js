// Model Probe: give the keyboard back to the page after a choice in a dropdown.
//
// A selectbox keeps the focus in its text input after an option is chosen, and Streamlit's button
// shortcuts ignore keys typed into an input: the Label page's hotkeys stopped working once a per-image
// dropdown had been used. Once per page, this releases the focus after a choice (click or Enter).
export default function () {
  if (window.__probeKeysToPage) return;
  window.__probeKeysToPage = true;
  const release = () => setTimeout(() => {
    const active = document.activeElement;
    if (active && active.closest && active.closest('[data-testid="stSelectbox"]')) active.blur();
  }, 50);
  document.addEventListener("click", (event) => {
    if (event.target.closest && event.target.closest('[role="option"]')) release();
  }, true);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target.closest && event.target.closest('[data-testid="stSelectbox"]')) release();
  }, true);
}
