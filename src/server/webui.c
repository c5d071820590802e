/* The chat page's routes, and the plain page: one self-contained HTML file
 * (no external assets) embedded when the bundle (web/) was not built.  The
 * plain page lists models from v1/models, streams replies over SSE from
 * v1/chat/completions (or v1/completions in completion mode, for base
 * models), renders a small markdown subset, shows reasoning separately, has
 * a stop button that aborts the fetch (the server then cancels) and asks
 * for the API key on a 401 (kept in localStorage as the bundle keeps it).
 * URLs are relative, so both pages work behind a proxy's path prefix. */
#include "server/webui.h"

#include "server/log.h"
#include "server/metrics.h"

#include <microhttpd.h>
#include <string.h>

#ifndef SERVER_WEBUI_BUNDLE
const server_webui_file server_webui_files[] = {{0, 0, 0, 0, 0}};
#endif

const char server_webui_html[] =
    "<!doctype html><html lang=en><head><meta charset=utf-8><title>kiln</title>"
    "<meta name=viewport content='width=device-width,initial-scale=1'>"
    "<style>"
    "body{font:15px/1.5 "
    "system-ui,sans-serif;margin:0;background:#f6f5f2;color:#222;display:flex;flex-direction:column;height:100vh}"
    "header{display:flex;gap:.6em;align-items:center;padding:.5em 1em;background:#2b2a28;color:#eee}"
    "header b{color:#f3a34a}select,button,textarea{font:inherit}"
    "#log{flex:1;overflow:auto;padding:1em;max-width:52em;width:100%;margin:0 auto;box-sizing:border-box}"
    ".msg{margin:.6em 0;padding:.6em .9em;border-radius:8px;white-space:normal}"
    ".user{background:#dfe9f7}.assistant{background:#fff;border:1px solid #ddd}"
    ".think{color:#777;font-size:.9em;border-left:3px solid "
    "#ccc;padding-left:.6em;margin-bottom:.4em;white-space:pre-wrap}"
    "pre{background:#272822;color:#eee;padding:.6em;border-radius:6px;overflow:auto}code{font-family:monospace}"
    "form{display:flex;gap:.5em;padding:.7em 1em;max-width:52em;width:100%;margin:0 auto;box-sizing:border-box}"
    "textarea{flex:1;height:3.2em;padding:.4em;border-radius:6px;border:1px solid #bbb}"
    "button{padding:0 1.1em;border-radius:6px;border:0;background:#f3a34a;cursor:pointer}#stop{background:#d55}"
    ".err{color:#b00}"
    "</style></head><body>"
    "<header><b>kiln</b><select id=model aria-label=model></select>"
    "<label><input type=checkbox id=compl> completion mode</label>"
    "<span id=status></span></header>"
    "<div id=log></div>"
    "<form id=f><textarea id=inp placeholder='Message (Enter sends, Shift+Enter new line)'></textarea>"
    "<button id=send type=submit>Send</button><button id=stop type=button disabled>Stop</button></form>"
    "<script>\n"
    "const $=id=>document.getElementById(id);let history=[],ctl=null;\n"
    "function hdr(){const k=localStorage.getItem('kiln.key');const "
    "h={'Content-Type':'application/json'};if(k)h.Authorization='Bearer '+k;return h}\n"
    /* a 401 asks for the key once per call and retries */
    "async function api(url,opt={}){for(let i=0;i<3;i++){const r=await "
    "fetch(url,{...opt,headers:hdr()});if(r.status!==401)return r;"
    "const k=prompt('This server needs an API key');if(!k)return r;localStorage.setItem('kiln.key',k)}return "
    "fetch(url,{...opt,headers:hdr()})}\n"
    "function esc(s){return s.replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]))}\n"
    "function md(s){let "
    "out='',parts=s.split('```');parts.forEach((p,i)=>{if(i%2){out+='<pre><code>'+esc(p.replace(/^[^\\n]*\\n/,''))+'</"
    "code></pre>';return}"
    "let "
    "h=esc(p).replace(/`([^`]+)`/g,'<code>$1</code>').replace(/\\*\\*([^*]+)\\*\\*/g,'<b>$1</b>').replace(/"
    "\\*([^*]+)\\*/g,'<i>$1</i>')"
    ".replace(/^### (.*)$/gm,'<h4>$1</h4>').replace(/^## (.*)$/gm,'<h3>$1</h3>').replace(/^# (.*)$/gm,'<h2>$1</h2>')"
    ".replace(/^[-*] (.*)$/gm,'&bull; $1').replace(/\\n/g,'<br>');out+=h});return out}\n"
    "async function models(){try{const r=await api('v1/models');const j=await r.json();"
    "$('model').innerHTML=j.data.filter(m=>!m.capabilities||m.capabilities.includes('completion'))"
    ".map(m=>'<option>'+esc(m.id)+'</"
    "option>').join('');pick()}catch(e){$('status').textContent='no models'}}\n"
    /* a model without a chat template is a base model: continue text */
    "async function pick(){try{const r=await "
    "api('api/show',{method:'POST',body:JSON.stringify({model:$('model').value})});"
    "const j=await r.json();$('compl').checked=!j.template}catch(e){}}\n"
    "$('model').onchange=()=>{history=[];pick()};\n"
    "function bubble(role){const d=document.createElement('div');d.className='msg "
    "'+role;$('log').appendChild(d);return d}\n"
    "async function send(text){const u=bubble('user');u.textContent=text;const a=bubble('assistant');a.innerHTML='<div "
    "class=think hidden></div><div class=body></div>';"
    "const th=a.querySelector('.think'),bd=a.querySelector('.body');let content='',reasoning='';"
    "const compl=$('compl').checked;let url,body;"
    "if(compl){url='v1/completions';body={model:$('model').value,prompt:text,max_tokens:200,stream:true}}"
    "else{history.push({role:'user',content:text});url='v1/chat/"
    "completions';body={model:$('model').value,messages:history,stream:true}}"
    "ctl=new AbortController();$('stop').disabled=false;$('send').disabled=true;$('status').textContent='generating…';"
    "try{const r=await api(url,{method:'POST',body:JSON.stringify(body),signal:ctl.signal});"
    "if(!r.ok){const j=await r.json().catch(()=>({}));throw new Error((j.error&&j.error.message)||r.statusText)}"
    "const rd=r.body.getReader(),dec=new TextDecoder();let buf='';"
    "for(;;){const {value,done}=await rd.read();if(done)break;buf+=dec.decode(value,{stream:true});let i;"
    "while((i=buf.indexOf('\\n\\n'))>=0){const ev=buf.slice(0,i);buf=buf.slice(i+2);if(!ev.startsWith('data: "
    "'))continue;const d=ev.slice(6);if(d==='[DONE]')continue;"
    "const j=JSON.parse(d);if(j.error)throw new Error(j.error.message);const c=j.choices&&j.choices[0];if(!c)continue;"
    "if(compl)content+=c.text||'';else{const "
    "dl=c.delta||{};content+=dl.content||'';reasoning+=dl.reasoning_content||''}"
    "th.hidden=!reasoning;th.textContent=reasoning;bd.innerHTML=md(content);$('log').scrollTop=1e9}}"
    "$('status').textContent=''}catch(e){if(e.name==='AbortError')$('status').textContent='stopped';else{bd.innerHTML+="
    "'<div class=err>'+esc(String(e.message||e))+'</div>';$('status').textContent=''}}"
    "if(!compl)history.push({role:'assistant',content});ctl=null;$('stop').disabled=true;$('send').disabled=false}\n"
    "$('f').onsubmit=e=>{e.preventDefault();const "
    "t=$('inp').value.trim();if(!t||ctl)return;$('inp').value='';send(t)};\n"
    "$('inp').onkeydown=e=>{if(e.key==='Enter'&&!e.shiftKey){e.preventDefault();$('f').requestSubmit()}};\n"
    "$('stop').onclick=()=>{if(ctl)ctl.abort()};models();\n"
    "</script></body></html>\n";

/* ---- routes ---- */

int server_webui_bundled(void) { return server_webui_files[0].path != NULL; }

int server_webui_path(const char *url) {
    return !strcmp(url, "/") || !strcmp(url, "/index.html") || !strcmp(url, "/favicon.ico") ||
           !strncmp(url, "/assets/", 8);
}

static int reply(struct MHD_Connection *c, int status, const char *type, const char *data, size_t len,
                 const char *cache) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", cache);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    server_metrics_request(status);
    server_reqlog_status(server_reqlog_current(), status);
    int rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

int server_webui_serve(struct MHD_Connection *c, const char *url) {
    static const char missing[] = "not found\n";
    if (!strcmp(url, "/")) url = "/index.html";
    if (!server_webui_bundled()) {
        if (!strcmp(url, "/index.html"))
            return reply(c, 200, "text/html; charset=utf-8", server_webui_html, strlen(server_webui_html), "no-cache");
        return reply(c, 404, "text/plain; charset=utf-8", missing, sizeof missing - 1, "no-cache");
    }
    for (const server_webui_file *f = server_webui_files; f->path; f++)
        if (!strcmp(f->path, url))
            return reply(c, 200, f->type, f->data, f->len,
                         f->immutable ? "public, max-age=31536000, immutable" : "no-cache");
    return reply(c, 404, "text/plain; charset=utf-8", missing, sizeof missing - 1, "no-cache");
}
