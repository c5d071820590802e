// Expected prompts for tests/test_gotmpl.c from Go's own text/template.
//
//	go run tests/gen_gotmpl.go tests/data/templates/go
//
// For each NAME.gotmpl in the folder it renders every case of cases.in.json
// (messages, tools, think) as Ollama's chat rendering does and writes
// NAME.cases.json: the cases with "prompt" added.  The data model follows
// Ollama's: messages collated (the system texts joined for .System,
// neighbours of one role but "tool" merged), message and tool structs whose
// tool definitions and call arguments print as JSON in the order they were
// written, properties ranged in key order (a Go map), and a template that
// names neither .Messages nor .Response given one at its end; a template
// without .Messages runs once per turn with {System, Prompt, Response}, the
// last run cut after its first .Response.
//
// Only the standard library: the CI needs no Go (the outputs are
// committed), this is run by hand when a template or case changes.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"text/template/parse"
)

// rawJSON keeps an object's text as written; it prints as compact JSON
// with HTML escapes, as encoding/json writes an ordered map.
type rawJSON []byte

func (r rawJSON) String() string {
	var c, e bytes.Buffer
	if json.Compact(&c, r) != nil {
		return "{}"
	}
	json.HTMLEscape(&e, c.Bytes())
	return e.String()
}

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r.String()), nil }

func (r *rawJSON) UnmarshalJSON(b []byte) error {
	*r = append(rawJSON{}, b...)
	return nil
}

type Prop struct {
	Type        string `json:"type,omitempty"`
	Description string `json:"description,omitempty"`
	Enum        []any  `json:"enum,omitempty"`
}

type Params struct {
	Type       string          `json:"type"`
	Required   []string        `json:"required,omitempty"`
	Properties map[string]Prop `json:"properties"`
}

type Function struct {
	Name        string
	Description string
	Parameters  Params
	raw         rawJSON
}

func (f *Function) UnmarshalJSON(b []byte) error {
	var v struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Parameters  Params `json:"parameters"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	f.Name, f.Description, f.Parameters, f.raw = v.Name, v.Description, v.Parameters, append(rawJSON{}, b...)
	return nil
}

func (f Function) String() string { return f.raw.String() }

type Tool struct {
	Type     string
	Function Function
	raw      rawJSON
}

func (t *Tool) UnmarshalJSON(b []byte) error {
	var v struct {
		Type     string   `json:"type"`
		Function Function `json:"function"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	t.Type, t.Function, t.raw = v.Type, v.Function, append(rawJSON{}, b...)
	return nil
}

func (t Tool) String() string { return t.raw.String() }

type CallFunction struct {
	Name      string  `json:"name"`
	Arguments rawJSON `json:"arguments"`
}

type ToolCall struct {
	ID       string       `json:"id"`
	Function CallFunction `json:"function"`
}

type Message struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	Thinking         string     `json:"thinking"`
	ReasoningContent string     `json:"reasoning_content"`
	ToolCalls        []ToolCall `json:"tool_calls"`
	Name             string     `json:"name"`
	ToolName         string     `json:"tool_name"`
	ToolCallID       string     `json:"tool_call_id"`
}

type Case struct {
	Name     string    `json:"name"`
	Think    *bool     `json:"think,omitempty"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools,omitempty"`
}

func idents(n parse.Node, out map[string]bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n != nil {
			for _, c := range n.Nodes {
				idents(c, out)
			}
		}
	case *parse.ActionNode:
		idents(n.Pipe, out)
	case *parse.IfNode:
		idents(&n.BranchNode, out)
	case *parse.RangeNode:
		idents(&n.BranchNode, out)
	case *parse.WithNode:
		idents(&n.BranchNode, out)
	case *parse.BranchNode:
		idents(n.Pipe, out)
		idents(n.List, out)
		if n.ElseList != nil {
			idents(n.ElseList, out)
		}
	case *parse.PipeNode:
		for _, c := range n.Cmds {
			for _, a := range c.Args {
				idents(a, out)
			}
		}
	case *parse.FieldNode:
		for _, s := range n.Ident {
			out[strings.ToLower(s)] = true
		}
	case *parse.VariableNode:
		for _, s := range n.Ident {
			out[strings.ToLower(s)] = true
		}
	case *parse.ChainNode:
		idents(n.Node, out)
		for _, s := range n.Field {
			out[strings.ToLower(s)] = true
		}
	}
}

// cutAfterResponse drops every node after the first .Response field, in
// document order, keeping that field.
func cutAfterResponse(n parse.Node, cut *bool) parse.Node {
	if *cut {
		return nil
	}
	switch t := n.(type) {
	case *parse.FieldNode:
		for _, s := range t.Ident {
			if s == "Response" {
				*cut = true
			}
		}
	case *parse.ListNode:
		var keep []parse.Node
		for _, c := range t.Nodes {
			if k := cutAfterResponse(c, cut); k != nil {
				keep = append(keep, k)
			}
		}
		t.Nodes = keep
	case *parse.IfNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.RangeNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.WithNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.ActionNode:
		cutPipe(t.Pipe, cut)
	}
	return n
}

func cutPipe(p *parse.PipeNode, cut *bool) {
	for _, c := range p.Cmds {
		var keep []parse.Node
		for _, a := range c.Args {
			if k := cutAfterResponse(a, cut); k != nil {
				keep = append(keep, k)
			}
		}
		c.Args = keep
	}
}

func cutBranch(b *parse.BranchNode, cut *bool) {
	cutPipe(b.Pipe, cut)
	if cutAfterResponse(b.List, cut) == nil {
		b.List.Nodes = nil
	}
	if b.ElseList != nil && cutAfterResponse(b.ElseList, cut) == nil {
		b.ElseList.Nodes = nil
	}
}

var funcs = template.FuncMap{"json": func(v any) string { b, _ := json.Marshal(v); return string(b) }}

func parseTmpl(src string) (*template.Template, map[string]bool, error) {
	t, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(src)
	if err != nil {
		return nil, nil, err
	}
	ids := map[string]bool{}
	idents(t.Tree.Root, ids)
	if !ids["messages"] && !ids["response"] {
		resp := &parse.ActionNode{NodeType: parse.NodeAction, Pipe: &parse.PipeNode{NodeType: parse.NodePipe,
			Cmds: []*parse.CommandNode{{NodeType: parse.NodeCommand,
				Args: []parse.Node{&parse.FieldNode{NodeType: parse.NodeField, Ident: []string{"Response"}}}}}}}
		t.Tree.Root.Nodes = append(t.Tree.Root.Nodes, resp)
	}
	return t, ids, nil
}

func render(src string, c Case) (string, error) {
	t, ids, err := parseTmpl(src)
	if err != nil {
		return "", err
	}
	var sys []string
	var coll []*Message
	for i := range c.Messages {
		m := &c.Messages[i]
		if m.Thinking == "" {
			m.Thinking = m.ReasoningContent
		}
		if m.ToolName == "" {
			m.ToolName = m.Name
		}
		if m.Role == "system" {
			sys = append(sys, m.Content)
		}
		if n := len(coll); n > 0 && coll[n-1].Role == m.Role && m.Role != "tool" {
			coll[n-1].Content += "\n\n" + m.Content
		} else {
			coll = append(coll, m)
		}
	}
	think := c.Think != nil && *c.Think
	set := c.Think != nil
	var b bytes.Buffer
	if ids["messages"] {
		tools := c.Tools
		err := t.Execute(&b, map[string]any{"System": strings.Join(sys, "\n\n"), "Messages": coll, "Tools": tools,
			"Response": "", "Think": think, "IsThinkSet": set})
		return b.String(), err
	}
	system, prompt, response := "", "", ""
	run := func(tt *template.Template) error {
		err := tt.Execute(&b, map[string]any{"System": system, "Prompt": prompt, "Response": response,
			"Think": think, "IsThinkSet": set})
		system, prompt, response = "", "", ""
		return err
	}
	for _, m := range coll {
		switch m.Role {
		case "system":
			if prompt != "" || response != "" {
				if err := run(t); err != nil {
					return "", err
				}
			}
			system = m.Content
		case "user":
			if response != "" {
				if err := run(t); err != nil {
					return "", err
				}
			}
			prompt = m.Content
		case "assistant":
			response = m.Content
		}
	}
	cut, _, _ := parseTmpl(src)
	done := false
	cutAfterResponse(cut.Tree.Root, &done)
	if err := run(cut); err != nil {
		return "", err
	}
	return b.String(), nil
}

func main() {
	dir := os.Args[1]
	in, err := os.ReadFile(filepath.Join(dir, "cases.in.json"))
	if err != nil {
		panic(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(in, &raw); err != nil {
		panic(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.gotmpl"))
	for _, path := range names {
		src, err := os.ReadFile(path)
		if err != nil {
			panic(err)
		}
		var out [][]byte
		for _, r := range raw {
			var c Case
			if err := json.Unmarshal(r, &c); err != nil {
				panic(err)
			}
			prompt, err := render(string(src), c)
			if err != nil {
				panic(fmt.Sprintf("%s, case %s: %v", path, c.Name, err))
			}
			// the case as written (its key order matters: objects print
			// in it), with the prompt after
			var pb bytes.Buffer
			enc := json.NewEncoder(&pb)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(prompt); err != nil {
				panic(err)
			}
			var cb bytes.Buffer
			if err := json.Compact(&cb, r); err != nil {
				panic(err)
			}
			one := bytes.TrimSuffix(cb.Bytes(), []byte("}"))
			one = append(one, []byte(`,"prompt":`)...)
			one = append(one, bytes.TrimSpace(pb.Bytes())...)
			out = append(out, append(one, '}'))
		}
		var buf bytes.Buffer
		buf.WriteString("[\n")
		for i, o := range out {
			buf.Write(o)
			if i+1 < len(out) {
				buf.WriteString(",")
			}
			buf.WriteString("\n")
		}
		buf.WriteString("]\n")
		dst := strings.TrimSuffix(path, ".gotmpl") + ".cases.json"
		if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
			panic(err)
		}
		fmt.Println("wrote", dst, len(out), "cases")
	}
}
