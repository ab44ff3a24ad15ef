//! `#[derive(Tree)]`: a struct or enum generic over its leaf type becomes a
//! tree of tensors. Parse (the item, its one leaf parameter) → analyze
//! (every field is a subtree, when its type mentions the leaf, or a static
//! value) → generate the `Tree`, `TreeValue` and `KernelParam` impls.
//!
//! The impls are on the traced form (`Params<Tensor>`); a subtree field's
//! type, with the leaf parameter replaced by `Tensor`, must itself be a
//! tree (a `Tensor`, a `Vec`/array/`Option`/tuple of trees, another derived
//! type), and a static field must be a `StaticArg` (it enters the compile
//! key and is cloned into results).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;
use syn::{Data, DeriveInput, Fields, GenericParam, Ident, Type};

use crate::paths::dsl_here;

/// One field: how it is reached and whether it holds tensors.
struct Field {
    /// Its name (named fields) or index (tuple fields).
    member: syn::Member,
    /// The binding used in `match` patterns.
    binding: Ident,
    /// Its type with the leaf parameter replaced by `Tensor`.
    traced: Type,
    /// Its declared type (for static fields).
    ty: Type,
    /// Whether its type mentions the leaf parameter.
    subtree: bool,
}

/// The derive's entry: the impls, or the errors.
pub fn derive(input: TokenStream) -> TokenStream {
    let item: DeriveInput = match syn::parse2(input) {
        Ok(i) => i,
        Err(e) => return e.to_compile_error(),
    };
    match expand(&item) {
        Ok(t) => t,
        Err(e) => e.to_compile_error(),
    }
}

fn expand(item: &DeriveInput) -> syn::Result<TokenStream> {
    let TypeParams { leaf, trees, order } = type_params(item)?;
    let dsl = dsl_here();
    let name = &item.ident;
    let tensor = quote!(#dsl::Tensor);
    let shapes: Vec<(Option<&Ident>, Vec<Field>, &Fields)> = match &item.data {
        Data::Struct(s) => vec![(None, fields(&s.fields, &leaf, &trees, &tensor), &s.fields)],
        Data::Enum(e) => e
            .variants
            .iter()
            .map(|v| {
                (
                    Some(&v.ident),
                    fields(&v.fields, &leaf, &trees, &tensor),
                    &v.fields,
                )
            })
            .collect(),
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span(),
                "`#[derive(Tree)]` applies to structs and enums, not unions",
            ))
        }
    };
    if matches!(item.data, Data::Enum(_)) && shapes.is_empty() {
        return Err(syn::Error::new(
            name.span(),
            "`#[derive(Tree)]` needs an enum with at least one variant",
        ));
    }
    let is_enum = matches!(item.data, Data::Enum(_));
    // The type's generic arguments, in order: `leaf_ty` for the leaf
    // parameter, `subtree(P)` for each subtree parameter `P`.
    let args =
        |leaf_ty: &TokenStream, subtree: &dyn Fn(&Ident) -> TokenStream| -> Vec<TokenStream> {
            order
                .iter()
                .map(|p| {
                    if p == &leaf {
                        leaf_ty.clone()
                    } else {
                        subtree(p)
                    }
                })
                .collect()
        };
    // The type with leaves `leaf_ty` (a subtree parameter's form with them).
    let form = |leaf_ty: &TokenStream| {
        let a = args(leaf_ty, &|p| quote!(<#p as #dsl::Tree>::Form<#leaf_ty>));
        quote!(#name<#(#a),*>)
    };
    let traced_args = args(&tensor, &|p| quote!(#p));
    let traced = quote!(#name<#(#traced_args),*>);
    let tree_bounds = quote!(<#(#trees: #dsl::Tree),*>);
    let carry_bounds = quote!(<#(#trees: #dsl::Carry),*>);
    let (form_l, form_m) = (form(&quote!(__L)), form(&quote!(__M)));
    let mut visit_arms = Vec::new();
    let mut map_arms = Vec::new();
    let mut structure_arms = Vec::new();
    let mut key_arms = Vec::new();
    let mut assemble_arms = Vec::new();
    for (index, (variant, fs, shape)) in shapes.iter().enumerate() {
        let path = match variant {
            Some(v) => quote!(#name::#v),
            None => quote!(#name),
        };
        let pattern = pattern(&path, fs, shape);
        let visits = fs.iter().filter(|f| f.subtree).map(|f| {
            let (b, t, seg) = (&f.binding, &f.traced, segment(&dsl, &f.member));
            quote! {
                __path.push(#seg);
                <#t as #dsl::Tree>::visit::<__L>(#b, __path, __f);
                __path.pop();
            }
        });
        visit_arms.push(quote!(#pattern => { #(#visits)* }));
        let mapped = fs.iter().map(|f| {
            let (b, t, seg) = (&f.binding, &f.traced, segment(&dsl, &f.member));
            if f.subtree {
                quote! {{
                    __path.push(#seg);
                    let __v = <#t as #dsl::Tree>::try_map::<__L, __M, __E>(#b, __path, __f);
                    __path.pop();
                    __v?
                }}
            } else {
                quote!(::core::clone::Clone::clone(#b))
            }
        });
        let mapped_value = construct(&path, fs, shape, mapped.collect());
        map_arms.push(quote!(#pattern => ::core::result::Result::Ok(#mapped_value),));
        let defs = fs.iter().map(|f| {
            let (b, t) = (&f.binding, &f.traced);
            if f.subtree {
                quote!(<#t as #dsl::Tree>::structure::<__L>(#b))
            } else {
                quote!(#dsl::tree_static_field(#b))
            }
        });
        let node = if is_enum {
            quote!(#dsl::TreeDef::Variant(#index, ::std::vec![#(#defs),*]))
        } else {
            quote!(#dsl::TreeDef::Node(::std::vec![#(#defs),*]))
        };
        structure_arms.push(quote!(#pattern => #node,));
        let n = fs.len();
        let keys = fs.iter().map(|f| {
            let (b, t) = (&f.binding, &f.traced);
            if f.subtree {
                quote!(<#t as #dsl::Tree>::write_key::<__L>(#b, __out))
            } else {
                quote!({ #dsl::tree_static_key(#b, __out); 0 })
            }
        });
        let header = if is_enum {
            quote!(#dsl::TreeDef::key_variant(__out, #index, #n))
        } else {
            quote!(#dsl::TreeDef::key_node(__out, #n))
        };
        key_arms.push(quote!(#pattern => { #header; 0usize #(+ #keys)* }));
        let built = fs.iter().enumerate().map(|(i, f)| {
            let (t, ty, seg) = (&f.traced, &f.ty, segment(&dsl, &f.member));
            if f.subtree {
                quote! {{
                    __path.push(#seg);
                    let __v = <#t as #dsl::Tree>::assemble::<__L>(&__c[#i], __path, __leaves);
                    __path.pop();
                    __v?
                }}
            } else {
                quote! {{
                    __path.push(#seg);
                    let __v = #dsl::tree_static_from_def::<#ty>(&__c[#i], __path);
                    __path.pop();
                    __v?
                }}
            }
        });
        let value = construct(&path, fs, shape, built.collect());
        let what = match variant {
            Some(v) => format!("variant `{v}` of `{name}` ({n} fields)"),
            None => format!("`{name}` ({n} fields)"),
        };
        assemble_arms.push(if is_enum {
            quote! {
                #dsl::TreeDef::Variant(#index, __c) if __c.len() == #n => {
                    ::core::result::Result::Ok(#value)
                }
            }
        } else {
            quote! {{
                let __c = __def.children(__path, ::core::option::Option::Some(#n), #what)?;
                ::core::result::Result::Ok(#value)
            }}
        });
    }
    let assemble_body = if is_enum {
        let expected = format!("a variant of `{name}`");
        quote! {
            match __def {
                #(#assemble_arms)*
                __other => ::core::result::Result::Err(
                    __path.error(::std::format!("expected {}, found {}", #expected, __other.describe())),
                ),
            }
        }
    } else {
        quote!(#(#assemble_arms)*)
    };
    let leaf_bound = quote!(#dsl::Leaf);
    let kp = quote!(#dsl::KernelParam);
    let forms = [
        (
            quote!(Host),
            quote!(collect_host),
            quote!(bind_host),
            quote!(#dsl::HostTensor),
        ),
        (
            quote!(Spec),
            quote!(collect_spec),
            quote!(bind_spec),
            quote!(#dsl::TensorSpec),
        ),
        (
            quote!(Buffer),
            quote!(collect_buffer),
            quote!(bind_buffer),
            quote!(#dsl::DeviceBuffer),
        ),
        (
            quote!(Sharded),
            quote!(collect_sharded),
            quote!(bind_sharded),
            quote!(#dsl::ShardedBuffer),
        ),
    ];
    let form_types = forms.iter().map(|(assoc, _, _, leaf_ty)| {
        let f = form(leaf_ty);
        quote!(type #assoc<'__a> = &'__a #f;)
    });
    let form_fns = forms.iter().map(|(_, collect, bind, leaf_ty)| {
        let f = form(leaf_ty);
        quote! {
            fn #collect<'__a>(
                __arg: &&'__a #f,
                __name: &'static str,
                __c: &mut #dsl::ArgCollector<'__a>,
            ) {
                #dsl::tree_collect::<Self, #leaf_ty>(*__arg, __name, __c)
            }
            fn #bind(
                __arg: &&#f,
                __next: &mut dyn ::core::iter::Iterator<Item = #tensor>,
            ) -> Self {
                #dsl::tree_bind::<Self, #leaf_ty>(*__arg, __next)
            }
        }
    });
    let empty_match = |arms: &Vec<TokenStream>| {
        if arms.is_empty() {
            quote!(match *__x {})
        } else {
            quote!(match __x { #(#arms)* })
        }
    };
    let tree_value = match trees.first() {
        None => quote! {
            #[automatically_derived]
            impl<__L: #leaf_bound> #dsl::TreeValue for #name<__L> {
                type Leaf = __L;
                type Tree = #traced;
            }
        },
        // Every subtree parameter a value of the same leaf type; the leaf
        // parameter is that type.
        Some(first) => {
            let leaf_ty = quote!(<#first as #dsl::TreeValue>::Leaf);
            let bounds = trees.iter().map(|p| match p == first {
                true => quote!(#p: #dsl::TreeValue),
                false => quote!(#p: #dsl::TreeValue<Leaf = #leaf_ty>),
            });
            let value_args = args(&leaf_ty, &|p| quote!(#p));
            let tree_args = args(&tensor, &|p| quote!(<#p as #dsl::TreeValue>::Tree));
            quote! {
                #[automatically_derived]
                impl<#(#bounds),*> #dsl::TreeValue for #name<#(#value_args),*> {
                    type Leaf = #leaf_ty;
                    type Tree = #name<#(#tree_args),*>;
                }
            }
        }
    };
    let visit_body = empty_match(&visit_arms);
    let map_body = empty_match(&map_arms);
    let structure_body = empty_match(&structure_arms);
    let key_body = empty_match(&key_arms);
    Ok(quote! {
        #[automatically_derived]
        impl #tree_bounds #dsl::Tree for #traced {
            type Form<__L: #leaf_bound> = #form_l;

            #[allow(unused_variables)]
            fn visit<'__a, __L: #leaf_bound>(
                __x: &'__a #form_l,
                __path: &mut #dsl::TreePath,
                __f: &mut dyn ::core::ops::FnMut(&#dsl::TreePath, &'__a __L),
            ) {
                #visit_body
            }

            #[allow(unused_variables)]
            fn try_map<__L: #leaf_bound, __M: #leaf_bound, __E>(
                __x: &#form_l,
                __path: &mut #dsl::TreePath,
                __f: &mut dyn ::core::ops::FnMut(&#dsl::TreePath, &__L) -> ::core::result::Result<__M, __E>,
            ) -> ::core::result::Result<#form_m, __E> {
                #map_body
            }

            #[allow(unused_variables)]
            fn structure<__L: #leaf_bound>(__x: &#form_l) -> #dsl::TreeDef {
                #structure_body
            }

            #[allow(unused_variables)]
            fn write_key<__L: #leaf_bound>(__x: &#form_l, __out: &mut ::std::vec::Vec<u8>) -> usize {
                #key_body
            }

            #[allow(unused_variables, unreachable_code)]
            fn assemble<__L: #leaf_bound>(
                __def: &#dsl::TreeDef,
                __path: &mut #dsl::TreePath,
                __leaves: &mut dyn ::core::iter::Iterator<Item = __L>,
            ) -> ::core::result::Result<#form_l, #dsl::HostError> {
                #assemble_body
            }
        }

        #[automatically_derived]
        impl #carry_bounds #dsl::Carry for #traced {}

        #[automatically_derived]
        impl #carry_bounds #dsl::Outputs for #traced {}

        #tree_value

        #[automatically_derived]
        impl #carry_bounds #kp for #traced {
            #(#form_types)*
            #(#form_fns)*
            fn primals(&self, __out: &mut ::std::vec::Vec<#tensor>) -> bool {
                #dsl::tree_primals(self, __out)
            }
            fn substitute(
                self,
                __replace: bool,
                __next: &mut dyn ::core::iter::Iterator<Item = #tensor>,
            ) -> Self {
                #dsl::tree_substitute(self, __replace, __next)
            }
        }
    })
}

/// The item's type parameters: its leaf (the only one, or the one whose
/// default is `Tensor`) and the others, subtrees given in their traced form
/// (`struct TrainState<P, T = Tensor> { params: P, opt: OptState<P, T> }`).
struct TypeParams {
    leaf: Ident,
    trees: Vec<Ident>,
    /// All of them, in declaration order.
    order: Vec<Ident>,
}

fn type_params(item: &DeriveInput) -> syn::Result<TypeParams> {
    let name = &item.ident;
    let mut types = Vec::new();
    for p in &item.generics.params {
        match p {
            GenericParam::Type(t) => types.push(t),
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "`#[derive(Tree)]` takes type parameters only (the leaf, and subtrees), \
                     not lifetimes or const parameters",
                ))
            }
        }
    }
    let is_tensor = |t: &syn::TypeParam| matches!(&t.default, Some(Type::Path(p)) if p.path.segments.last().is_some_and(|s| s.ident == "Tensor"));
    let leaf = match types.as_slice() {
        [] => {
            return Err(syn::Error::new(
                name.span(),
                format!(
                    "`#[derive(Tree)]` needs `{name}` generic over its leaf: `struct {name}<T = Tensor> {{ w: T, .. }}`; \
                     the one type then holds `Tensor`s in a kernel, `DeviceBuffer`s on the device and \
                     `HostTensor`s on the host"
                ),
            ))
        }
        [only] => only.ident.clone(),
        many => match many.iter().filter(|t| is_tensor(t)).collect::<Vec<_>>().as_slice() {
            [one] => one.ident.clone(),
            marked => {
                let span = marked.get(1).map_or(many[1].span(), |t| t.span());
                return Err(syn::Error::new(
                    span,
                    format!(
                        "`#[derive(Tree)]` cannot tell which type parameter of `{name}` is the leaf: give the leaf, \
                         and only it, the default `Tensor` (`struct TrainState<P, T = Tensor>`); the others are \
                         subtrees"
                    ),
                ));
            }
        },
    };
    let order: Vec<Ident> = types.iter().map(|t| t.ident.clone()).collect();
    let trees = order.iter().filter(|p| **p != leaf).cloned().collect();
    Ok(TypeParams { leaf, trees, order })
}

/// The fields of one struct or variant.
fn fields(fields: &Fields, leaf: &Ident, trees: &[Ident], tensor: &TokenStream) -> Vec<Field> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let member = match &f.ident {
                Some(id) => syn::Member::Named(id.clone()),
                None => syn::Member::Unnamed(syn::Index::from(i)),
            };
            let binding = format_ident!("__f{}", i, span = Span::call_site());
            let mut traced = f.ty.clone();
            let mut replace = Replace {
                leaf,
                with: syn::parse2(tensor.clone()).unwrap_or_else(|_| f.ty.clone()),
                found: false,
            };
            replace.visit_type_mut(&mut traced);
            Field {
                member,
                binding,
                traced,
                ty: f.ty.clone(),
                subtree: replace.found
                    || mentions(&f.ty, leaf)
                    || trees.iter().any(|p| mentions(&f.ty, p)),
            }
        })
        .collect()
}

/// Replaces the leaf parameter by `Tensor` in a type.
struct Replace<'a> {
    leaf: &'a Ident,
    with: Type,
    found: bool,
}

impl VisitMut for Replace<'_> {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::Path(p) = ty {
            if p.qself.is_none() && p.path.is_ident(self.leaf) {
                *ty = self.with.clone();
                self.found = true;
                return;
            }
        }
        syn::visit_mut::visit_type_mut(self, ty);
    }
}

/// Whether `ty` names `leaf` anywhere (also as a path segment).
fn mentions(ty: &Type, leaf: &Ident) -> bool {
    struct Find<'a>(&'a Ident, bool);
    impl<'ast> Visit<'ast> for Find<'_> {
        fn visit_ident(&mut self, i: &'ast Ident) {
            self.1 |= i == self.0;
        }
    }
    let mut f = Find(leaf, false);
    f.visit_type(ty);
    f.1
}

/// The path segment of a field: its name, or its index.
fn segment(dsl: &TokenStream, member: &syn::Member) -> TokenStream {
    match member {
        syn::Member::Named(id) => {
            let s = id.to_string();
            let s = s.strip_prefix("r#").unwrap_or(&s).to_string();
            quote!(#dsl::PathSegment::Field(#s))
        }
        syn::Member::Unnamed(i) => {
            let i = i.index as usize;
            quote!(#dsl::PathSegment::Index(#i))
        }
    }
}

/// The pattern binding every field of `path` by reference.
fn pattern(path: &TokenStream, fs: &[Field], shape: &Fields) -> TokenStream {
    let binds = fs.iter().map(|f| {
        let (m, b) = (&f.member, &f.binding);
        quote!(#m: #b)
    });
    match shape {
        Fields::Unit => quote!(#path),
        _ => quote!(#path { #(#binds),* }),
    }
}

/// The value of `path` with `values`, one per field in order.
fn construct(
    path: &TokenStream,
    fs: &[Field],
    shape: &Fields,
    values: Vec<TokenStream>,
) -> TokenStream {
    let members = fs.iter().map(|f| &f.member);
    match shape {
        Fields::Unit => quote!(#path),
        _ => quote_spanned!(Span::call_site()=> #path { #(#members: #values),* }),
    }
}
