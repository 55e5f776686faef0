// Model Probe: show the image of the point under the mouse on a Streamlit plotly chart.
//
// data = {chart: the chart's element key, scope: a cache scope (e.g. a run id),
//         image: null or {id, src, caption} for the last point asked for}.
// Hovering a point whose customdata is an integer sets the state value "hover" to it;
// Python answers with data.image for that point. Images already seen are cached here,
// so moving back over a point shows it at once.
const seen = new Map();

function tooltipOf(chart) {
  const id = `probe-hover-${chart}`;
  let tip = document.getElementById(id);
  if (!tip) {
    tip = document.createElement("div");
    tip.id = id;
    tip.className = "probe-hover-tooltip";
    tip.style.cssText = "position:fixed;z-index:100000;pointer-events:none;display:none;background:#fff;" +
      "color:#222;border:1px solid #bbb;border-radius:6px;padding:4px;box-shadow:0 2px 8px rgba(0,0,0,.25);" +
      "font:12px sans-serif";
    tip.innerHTML = '<img alt="image of the hovered point" style="display:block;width:112px;height:112px;' +
      'image-rendering:pixelated"><div class="probe-hover-caption" style="max-width:112px"></div>';
    document.body.appendChild(tip);
  }
  return tip;
}

export default function (component) {
  const { data, setStateValue } = component;
  const tip = tooltipOf(data.chart);
  const picture = tip.querySelector("img");
  const caption = tip.querySelector(".probe-hover-caption");
  const cacheKey = (id) => `${data.chart}|${data.scope}|${id}`;
  const show = (entry) => {
    picture.src = entry.src;
    caption.textContent = entry.caption || "";
  };
  if (data.image) {
    seen.set(cacheKey(data.image.id), data.image);
    if (tip.dataset.point === cacheKey(data.image.id)) show(data.image);
  }

  let graph = null;
  const onHover = (event) => {
    const point = event.points && event.points[0];
    if (!point || !Number.isInteger(point.customdata)) return;
    tip.dataset.point = cacheKey(point.customdata);
    const mouse = event.event || {};
    const x = mouse.clientX || 0, y = mouse.clientY || 0;
    // Keep the tooltip inside the window.
    tip.style.left = `${x + 140 > window.innerWidth ? x - 140 : x + 18}px`;
    tip.style.top = `${y + 160 > window.innerHeight ? y - 160 : y + 18}px`;
    tip.style.display = "block";
    const known = seen.get(cacheKey(point.customdata));
    if (known) {
      show(known);
    } else {
      picture.removeAttribute("src");
      caption.textContent = "loading…";
      setStateValue("hover", point.customdata);
    }
  };
  const onUnhover = () => { tip.style.display = "none"; };
  const detach = () => {
    if (graph && typeof graph.removeListener === "function") {
      graph.removeListener("plotly_hover", onHover);
      graph.removeListener("plotly_unhover", onUnhover);
    }
  };
  // The chart may render after this component, and Streamlit may replace its element on a rerun.
  const attach = () => {
    const host = document.querySelector(`.st-key-${data.chart} .js-plotly-plot`);
    if (!host || typeof host.on !== "function" || host === graph) return;
    detach();
    graph = host;
    graph.on("plotly_hover", onHover);
    graph.on("plotly_unhover", onUnhover);
  };
  attach();
  const timer = setInterval(attach, 500);
  return () => {
    // Not hidden here: this also runs when Python answers with an image, just before it is shown.
    clearInterval(timer);
    detach();
  };
}
